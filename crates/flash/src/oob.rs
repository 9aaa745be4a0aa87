//! The out-of-band (spare) area of a page.
//!
//! Real NAND pages carry a few spare bytes beside the data, where FTLs keep what
//! they need to rebuild their mapping after a crash. flexssd's record names the
//! page's owner, the logical page it holds, a sequence number that orders all of an
//! owner's writes, and its kind. A CRC makes a torn record read as "not programmed".
//!
//! On a device whose bytes can outlive a host crash (the file backend, or a
//! device recording crash states), the record also carries a 24-bit check of
//! the page's data ([`Oob::encode_checked`]): the kernel persists a page's data
//! and its record separately, so after a power loss a valid record may sit
//! beside data that never reached the disk (zeros, or what the page held before
//! its block was erased). [`Oob::data_matches`] tells such a torn page apart.
//! Records without the check (memory devices, older files) are taken as intact.

/// Bytes of out-of-band data per page.
pub const OOB_SIZE: usize = 32;
const MAGIC: u32 = 0x4F4F_4246; // "FBOO"
/// Bit of the kind byte saying bytes 25..28 hold a check of the page's data.
const CHECKED: u8 = 0x80;

/// The 24-bit check of a page's data kept in its record.
fn data_check(data: &[u8]) -> [u8; 3] {
    let c = crc32fast::hash(data).to_le_bytes();
    [c[0], c[1], c[2]]
}

/// What a programmed page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OobKind {
    /// Host data for logical page `lba`.
    Data = 1,
    /// A trim record: the page's data lists the logical ranges discarded at `seq`.
    Trim = 2,
}

/// The out-of-band record of one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oob {
    /// Owner (vSSD id) of the page.
    pub owner: u32,
    /// What the page holds.
    pub kind: OobKind,
    /// Logical page number (for [`OobKind::Data`]).
    pub lba: u64,
    /// Sequence number of the write that produced the content (kept when GC moves it).
    pub seq: u64,
}

impl Oob {
    /// Serialises the record.
    pub fn encode(&self) -> [u8; OOB_SIZE] {
        let mut b = [0u8; OOB_SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.owner.to_le_bytes());
        b[8..16].copy_from_slice(&self.lba.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24] = self.kind as u8;
        let crc = crc32fast::hash(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Serialises the record with a check of the page's `data`, so that a
    /// crash that kept the record but not the data is detected (see the module
    /// docs).
    pub fn encode_checked(&self, data: &[u8]) -> [u8; OOB_SIZE] {
        let mut b = self.encode();
        b[24] |= CHECKED;
        b[25..28].copy_from_slice(&data_check(data));
        let crc = crc32fast::hash(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Whether `data` is the data the raw record `b` was written with: true
    /// when `b` carries no data check (see [`Oob::encode_checked`]).
    pub fn data_matches(b: &[u8], data: &[u8]) -> bool {
        b.len() < OOB_SIZE || b[24] & CHECKED == 0 || b[25..28] == data_check(data)
    }

    /// Parses a record; `None` for an erased or torn area.
    pub fn decode(b: &[u8]) -> Option<Oob> {
        if b.len() < OOB_SIZE || u32::from_le_bytes(b[0..4].try_into().ok()?) != MAGIC {
            return None;
        }
        if crc32fast::hash(&b[..28]) != u32::from_le_bytes(b[28..32].try_into().ok()?) {
            return None;
        }
        let kind = match b[24] & !CHECKED {
            1 => OobKind::Data,
            2 => OobKind::Trim,
            _ => return None,
        };
        Some(Oob {
            owner: u32::from_le_bytes(b[4..8].try_into().ok()?),
            lba: u64::from_le_bytes(b[8..16].try_into().ok()?),
            seq: u64::from_le_bytes(b[16..24].try_into().ok()?),
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_records() {
        let o = Oob {
            owner: 7,
            kind: OobKind::Trim,
            lba: 1 << 40,
            seq: 99,
        };
        let mut b = o.encode();
        assert_eq!(Oob::decode(&b), Some(o));
        b[10] ^= 1;
        assert_eq!(Oob::decode(&b), None, "a flipped bit must fail the CRC");
        assert_eq!(Oob::decode(&[0u8; OOB_SIZE]), None);
    }

    #[test]
    fn a_checked_record_knows_its_data() {
        let o = Oob {
            owner: 1,
            kind: OobKind::Data,
            lba: 5,
            seq: 6,
        };
        let data = vec![7u8; 4096];
        let b = o.encode_checked(&data);
        assert_eq!(Oob::decode(&b), Some(o));
        assert!(Oob::data_matches(&b, &data));
        assert!(
            !Oob::data_matches(&b, &[0u8; 4096]),
            "zeros are not the data"
        );
        assert!(
            Oob::data_matches(&o.encode(), &[0u8; 4096]),
            "no check, no verdict"
        );
    }
}
