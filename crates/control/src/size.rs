//! Human-friendly sizes and block ranges.
//!
//! Capacities appear in config files, HTTP requests and on the command line, where
//! `"512M"` is kinder than `536870912`; block ranges (`"0..32"`) are how researchers
//! place two vSSDs on the same channels. Both parse from strings with errors that
//! say what was expected, and [`ByteSize`] also accepts a plain integer in TOML and
//! JSON.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Parses a size: a number of bytes, or a number with a binary suffix `K`, `M`, `G`
/// or `T` (powers of 1024; case-insensitive; `KiB`/`KB` style spellings and a
/// trailing `B` are accepted too). `"512M"` is 536870912.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || {
        format!("invalid size {s:?}: expected a number of bytes or a number with a K, M, G or T suffix (powers of 1024), e.g. 512M or 2G")
    };
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = t[..digits]
        .parse()
        .map_err(|_| format!("invalid size {s:?}: number too large"))?;
    let suffix = t[digits..].trim().to_ascii_lowercase();
    let shift = match suffix.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size {s:?}: too large"))
}

/// Formats a byte count with the largest binary unit that divides it evenly, or
/// with one decimal otherwise: `536870912` → `"512M"`, `1610612736` → `"1.5G"`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        let u = 1u64 << shift;
        if bytes >= u {
            return if bytes.is_multiple_of(u) {
                format!("{}{unit}", bytes / u)
            } else {
                format!("{:.1}{unit}", bytes as f64 / u as f64)
            };
        }
    }
    format!("{bytes}B")
}

/// A size in bytes that deserializes from an integer or from a size string (see
/// [`parse_size`]) and serializes as an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes or a string such as \"512M\" or \"2G\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {v}: must not be negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ByteSize, E> {
                Err(E::custom(format!("invalid size {v}: must be a whole number of bytes or a string such as \"512M\"")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A range of block indices within each plane, `start..end` (end exclusive), written
/// as the string `"A..B"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRange {
    /// First block.
    pub start: u32,
    /// One past the last block.
    pub end: u32,
}

impl BlockRange {
    /// Blocks in the range.
    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range holds no block.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether two ranges share a block.
    pub fn overlaps(&self, other: &BlockRange) -> bool {
        self.start < other.end && other.start < self.end
    }
}

impl FromStr for BlockRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("invalid block range {s:?}: expected START..END (end exclusive), e.g. 0..32")
        };
        let (a, b) = s.trim().split_once("..").ok_or_else(bad)?;
        let start: u32 = a.trim().parse().map_err(|_| bad())?;
        let end: u32 = b.trim().parse().map_err(|_| bad())?;
        if end <= start {
            return Err(format!(
                "invalid block range {s:?}: END must be greater than START"
            ));
        }
        Ok(BlockRange { start, end })
    }
}

impl fmt::Display for BlockRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

impl Serialize for BlockRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BlockRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 1 T "), Ok(1 << 40));
        assert_eq!(parse_size("8K"), Ok(8192));
        assert_eq!(parse_size("100B"), Ok(100));
        for bad in ["", "M", "12X", "1.5G", "-1", "G12", "99999999999999999999"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("invalid size"), "{bad}: {e}");
        }
        assert!(parse_size("16777216T").unwrap_err().contains("too large"));
    }

    #[test]
    fn sizes_format() {
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(3 << 29), "1.5G");
        assert_eq!(format_size(100), "100B");
        assert_eq!(format_size(1 << 40), "1T");
    }

    #[test]
    fn byte_size_serde() {
        #[derive(Deserialize)]
        struct T {
            a: ByteSize,
            b: ByteSize,
        }
        let t: T = serde_json::from_str(r#"{"a": 4096, "b": "1M"}"#).unwrap();
        assert_eq!((t.a.0, t.b.0), (4096, 1 << 20));
        let e = serde_json::from_str::<T>(r#"{"a": "lots", "b": 1}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("invalid size"), "{e}");
        assert!(serde_json::from_str::<T>(r#"{"a": -1, "b": 1}"#).is_err());
        assert_eq!(serde_json::to_string(&ByteSize(7)).unwrap(), "7");
    }

    #[test]
    fn block_ranges() {
        let r: BlockRange = "0..32".parse().unwrap();
        assert_eq!((r.start, r.end, r.len()), (0, 32, 32));
        assert!(r.overlaps(&"31..40".parse().unwrap()));
        assert!(!r.overlaps(&"32..40".parse().unwrap()));
        assert!("5..5".parse::<BlockRange>().is_err());
        assert!("a..b".parse::<BlockRange>().is_err());
        assert!("7".parse::<BlockRange>().is_err());
        assert_eq!(r.to_string(), "0..32");
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"0..32\"");
    }
}
