//! Fuzzes request handling: the pure header parser and classifier, checked
//! against their invariants, then the bytes as a transmission-phase stream on a
//! real connection to a guarded export.
#![no_main]

mod common;

use blockdev::BlockSizes;
use libfuzzer_sys::fuzz_target;
use nbd::proto::{self, Decision, Limits};

fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map(|s| u32::from_be_bytes(s.try_into().unwrap())).unwrap_or(0)
}

fn check_classify(data: &[u8]) {
    let Ok(h) = proto::parse_request(data) else {
        return;
    };
    // Limits from the bytes after the header.
    let tail = &data[proto::REQUEST_HEADER_LEN..];
    let max_payload = be32(tail, 0).clamp(4096, 1 << 31);
    let dev = BlockSizes { minimum: be32(tail, 4), preferred: be32(tail, 8), maximum: be32(tail, 12) };
    let block = proto::effective_block_sizes(dev, max_payload);
    assert!(block.minimum.is_power_of_two() && block.minimum <= 65536);
    assert!(block.preferred.is_power_of_two());
    assert_eq!(block.maximum % block.minimum, 0);
    let flags = tail.get(16).copied().unwrap_or(0);
    let size = u64::from(be32(tail, 17)) << (flags % 40);
    let l = Limits {
        size,
        block,
        max_payload,
        read_only: flags & 1 != 0,
        structured: flags & 2 != 0,
        block_status: flags & 4 != 0,
        fast_zero: flags & 8 != 0,
    };
    let fits = |offset: u64, len: u32| {
        let end = offset.checked_add(u64::from(len)).expect("range overflows");
        assert!(end <= size, "range past the end of the export");
        assert_eq!(offset % u64::from(block.minimum), 0, "misaligned offset");
        assert_eq!(u64::from(len) % u64::from(block.minimum), 0, "misaligned length");
    };
    match proto::classify(&h, &l) {
        Decision::Read { offset, len } => {
            assert_eq!(h.kind, proto::CMD_READ);
            assert!(len <= block.maximum && len <= max_payload);
            fits(offset, len);
        }
        Decision::Write { offset, len, .. } => {
            assert_eq!(h.kind, proto::CMD_WRITE);
            assert!(!l.read_only);
            assert!(len <= block.maximum && len <= max_payload);
            fits(offset, len);
        }
        Decision::Trim { offset, len, .. } | Decision::WriteZeroes { offset, len, .. } => {
            assert!(!l.read_only);
            assert!(
                h.flags & proto::CMD_FLAG_FAST_ZERO == 0 || (h.kind == proto::CMD_WRITE_ZEROES && l.fast_zero),
                "a fast zero the export cannot do fast, or on another command"
            );
            fits(offset, len);
        }
        Decision::Cache { offset, len } => fits(offset, len),
        Decision::BlockStatus { offset, len, req_one } => {
            assert_eq!(h.kind, proto::CMD_BLOCK_STATUS);
            assert!(l.block_status, "block status without a selected context");
            assert!(len > 0);
            assert_eq!(req_one, h.flags & proto::CMD_FLAG_REQ_ONE != 0);
            fits(offset, len);
        }
        Decision::Reject { errno, skip } => {
            assert_ne!(errno, 0);
            if skip > 0 {
                assert_eq!(h.kind, proto::CMD_WRITE);
                assert_eq!(skip, h.length);
                assert!(skip <= max_payload);
            }
        }
        Decision::HangUp(_) => assert!(h.kind == proto::CMD_WRITE && h.length > max_payload),
        Decision::Flush => assert_eq!(h.kind, proto::CMD_FLUSH),
        Decision::Disconnect => assert_eq!(h.kind, proto::CMD_DISC),
    }
}

fuzz_target!(|data: &[u8]| {
    check_classify(data);
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut input = common::handshake(first & 1 != 0, first & 2 != 0);
    input.extend_from_slice(rest);
    common::run_connection(input);
});
