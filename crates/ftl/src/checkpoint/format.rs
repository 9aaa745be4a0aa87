//! The checkpoint byte format: what a vSSD checkpoint says and how it is laid out.
//! [`CheckpointStore`](crate::CheckpointStore) only keeps opaque bytes; this
//! module is the single place that writes and reads them, so the format can be
//! read (and tested) without a vSSD.
//!
//! Layout, all integers little-endian:
//!
//! | bytes | field                                                      |
//! |-------|------------------------------------------------------------|
//! | 8     | magic `FXCKPT01`                                           |
//! | 4     | vSSD id (owner id of its pages)                            |
//! | 8     | sequence number covered: every write and trim up to it     |
//! | 8     | logical pages of the vSSD                                  |
//! | 8     | `n`, the number of entries                                 |
//! | 12·n  | entries: logical page (u32), sequence number of its content (u64), one per mapped logical page, in logical page order |

/// First bytes of every checkpoint.
const MAGIC: &[u8; 8] = b"FXCKPT01";
/// Bytes before the entries.
const HEADER: usize = 36;
/// Bytes per entry.
const ENTRY: usize = 12;

/// Encodes the checkpoint of vSSD `id` covering sequence number `seq`, where
/// `lseq[lba]` is the sequence number of logical page `lba`'s content (0 when
/// unmapped).
pub(crate) fn encode(id: u32, seq: u64, lseq: &[u64]) -> Vec<u8> {
    let mapped = lseq.iter().filter(|&&s| s != 0).count();
    let mut out = Vec::with_capacity(32 + mapped * ENTRY);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(lseq.len() as u64).to_le_bytes());
    out.extend_from_slice(&(mapped as u64).to_le_bytes());
    for (lba, &s) in lseq.iter().enumerate() {
        if s != 0 {
            out.extend_from_slice(&(lba as u32).to_le_bytes());
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
    out
}

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// Sequence number covered.
    pub(crate) seq: u64,
    /// (logical page, sequence number of its content) of every mapped logical page.
    pub(crate) entries: Vec<(u32, u64)>,
}

/// Decodes and checks the checkpoint of vSSD `id` with `logical_pages` logical
/// pages. The error says what is wrong with the bytes.
pub(crate) fn decode(bytes: &[u8], id: u32, logical_pages: u64) -> Result<Checkpoint, String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not a flexssd checkpoint".into());
    }
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let owner = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if owner != id {
        return Err(format!("belongs to vSSD id {owner}, not {id}"));
    }
    let seq = u64_at(12);
    let pages = u64_at(20);
    if pages != logical_pages {
        return Err(format!(
            "made for {pages} logical pages, vSSD has {logical_pages}"
        ));
    }
    let n = u64_at(28) as usize;
    if bytes.len() != HEADER + n * ENTRY {
        return Err(format!(
            "{} bytes, expected {}",
            bytes.len(),
            HEADER + n * ENTRY
        ));
    }
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let o = HEADER + i * ENTRY;
        let lba = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let s = u64_at(o + 4);
        if lba as u64 >= logical_pages || s == 0 || s > seq {
            return Err(format!("entry {i} (lba {lba}, seq {s}) is out of range"));
        }
        entries.push((lba, s));
    }
    Ok(Checkpoint { seq, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let lseq = [0, 7, 0, 3];
        let b = encode(9, 8, &lseq);
        assert_eq!(b.len(), HEADER + 2 * ENTRY);
        assert_eq!(&b[..8], b"FXCKPT01");
        assert_eq!(&b[8..12], &9u32.to_le_bytes());
        assert_eq!(&b[36..40], &1u32.to_le_bytes());
        assert_eq!(&b[40..48], &7u64.to_le_bytes());
        let c = decode(&b, 9, 4).unwrap();
        assert_eq!(
            c,
            Checkpoint {
                seq: 8,
                entries: vec![(1, 7), (3, 3)]
            }
        );
    }

    #[test]
    fn refuses_what_is_not_its_own() {
        let b = encode(9, 8, &[0, 7, 0, 3]);
        assert!(decode(&b[..20], 9, 4)
            .unwrap_err()
            .contains("not a flexssd"));
        assert!(decode(&b, 2, 4).unwrap_err().contains("vSSD id 9"));
        assert!(decode(&b, 9, 5).unwrap_err().contains("4 logical pages"));
        assert!(decode(&b[..b.len() - 1], 9, 4)
            .unwrap_err()
            .contains("expected"));
        let stale = encode(9, 6, &[0, 7, 0, 3]);
        assert!(decode(&stale, 9, 4).unwrap_err().contains("out of range"));
    }
}
