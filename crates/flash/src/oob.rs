//! The out-of-band (spare) area of a page.
//!
//! Real NAND pages carry a few spare bytes beside the data, where FTLs keep what
//! they need to rebuild their mapping after a crash. flexssd's record names the
//! page's owner, the logical page it holds, a sequence number that orders all of an
//! owner's writes, and its kind. A CRC makes a torn record read as "not programmed".
//!
//! On a device whose bytes can outlive a host crash (the file backend, or a
//! device recording crash states), the record also carries a 32-bit check of
//! the page's data, its CRC-32 ([`Oob::encode_checked`]): the kernel persists a
//! page's data and its record separately, so after a power loss a valid record
//! may sit beside data that never reached the disk (zeros, or what the page
//! held before its block was erased). [`Oob::data_matches`] tells such a torn
//! page apart. Records without the check (memory devices, older files) are
//! taken as intact.
//!
//! The check was 24 bits (three bytes free in the record) until the long
//! power-loss suite met a collision: a torn page whose old data, another
//! logical page's, had the same 24 bits as the data its new record was written
//! with, so recovery served that other page's data. The fourth byte is the top
//! byte of the logical page number, which no vSSD reaches (2^56 pages); a flag
//! says so, and records written before it keep their 24-bit check.

/// Bytes of out-of-band data per page.
pub const OOB_SIZE: usize = 32;
const MAGIC: u32 = 0x4F4F_4246; // "FBOO"
/// Bit of the kind byte saying bytes 25..28 hold a check of the page's data.
const CHECKED: u8 = 0x80;
/// Bit of the kind byte saying byte 15 holds the check's fourth byte (the
/// logical page number is then 7 bytes).
const WIDE: u8 = 0x40;
/// Logical pages below this have a free top byte for [`WIDE`].
const WIDE_LBAS: u64 = 1 << 56;

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
        let c = crc32fast::hash(data).to_le_bytes();
        b[24] |= CHECKED;
        b[25..28].copy_from_slice(&c[..3]);
        if self.lba < WIDE_LBAS {
            b[24] |= WIDE;
            b[15] = c[3];
        }
        let crc = crc32fast::hash(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Whether `data` is the data the raw record `b` was written with: true
    /// when `b` carries no data check (see [`Oob::encode_checked`]).
    pub fn data_matches(b: &[u8], data: &[u8]) -> bool {
        if b.len() < OOB_SIZE || b[24] & CHECKED == 0 {
            return true;
        }
        let c = crc32fast::hash(data).to_le_bytes();
        b[25..28] == c[..3] && (b[24] & WIDE == 0 || b[15] == c[3])
    }

    /// Parses a record; `None` for an erased or torn area.
    pub fn decode(b: &[u8]) -> Option<Oob> {
        if b.len() < OOB_SIZE || u32::from_le_bytes(b[0..4].try_into().ok()?) != MAGIC {
            return None;
        }
        if crc32fast::hash(&b[..28]) != u32::from_le_bytes(b[28..32].try_into().ok()?) {
            return None;
        }
        let kind = match b[24] & !(CHECKED | WIDE) {
            1 => OobKind::Data,
            2 => OobKind::Trim,
            _ => return None,
        };
        let mut lba = u64::from_le_bytes(b[8..16].try_into().ok()?);
        if b[24] & WIDE != 0 {
            lba &= WIDE_LBAS - 1;
        }
        Some(Oob {
            owner: u32::from_le_bytes(b[4..8].try_into().ok()?),
            lba,
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

    /// Two pages whose CRC-32s share their low 24 bits (found by search, as
    /// the long power-loss suite met two): the 24-bit check took one for the
    /// other, the 32-bit one does not; records of the 24-bit form still read.
    #[test]
    fn the_data_check_tells_apart_pages_whose_crcs_share_24_bits() {
        let page = |i: u64| {
            let mut p = vec![0u8; 4096];
            for (k, c) in p.chunks_mut(8).enumerate() {
                c.copy_from_slice(
                    &(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k as u64).to_le_bytes(),
                );
            }
            p
        };
        let mut seen = std::collections::HashMap::new();
        let (a, b) = (0u64..)
            .find_map(|i| {
                let c = crc32fast::hash(&page(i));
                seen.insert(c & 0xFF_FFFF, i)
                    .filter(|&j| crc32fast::hash(&page(j)) != c)
                    .map(|j| (j, i))
            })
            .unwrap();
        let o = Oob {
            owner: 1,
            kind: OobKind::Data,
            lba: 11,
            seq: 1775,
        };
        let rec = o.encode_checked(&page(a));
        assert_eq!(Oob::decode(&rec), Some(o));
        assert!(Oob::data_matches(&rec, &page(a)));
        assert!(!Oob::data_matches(&rec, &page(b)), "pages {a} and {b}");
        // the 24-bit form (before the wide check): decodes, and cannot tell them apart
        let mut old = o.encode();
        old[24] |= CHECKED;
        old[25..28].copy_from_slice(&crc32fast::hash(&page(a)).to_le_bytes()[..3]);
        let crc = crc32fast::hash(&old[..28]);
        old[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Oob::decode(&old), Some(o));
        assert!(Oob::data_matches(&old, &page(b)));
        // a page number too large for the wide form keeps the 24-bit check
        let big = Oob { lba: 1 << 60, ..o };
        assert_eq!(Oob::decode(&big.encode_checked(&page(a))), Some(big));
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
