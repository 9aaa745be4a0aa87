//! Fuzzes the handshake: the pure option parsers, then the bytes as the whole
//! client stream of a real connection (from the client flags on) to a guarded
//! export.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use nbd::proto::{self, ClientOption};

fn check_options(data: &[u8]) {
    let _ = proto::parse_client_flags(u32::from_be_bytes([0, 0, 0, data.first().copied().unwrap_or(0)]));
    if let Ok(h) = proto::parse_option_header(data) {
        assert!(h.length <= proto::MAX_OPTION_LEN);
        let body = &data[proto::OPTION_HEADER_LEN..];
        let body = &body[..body.len().min(h.length as usize)];
        match proto::parse_option(h.option, body) {
            ClientOption::ExportName(n) => assert!(n.len() <= proto::MAX_STRING_LEN),
            ClientOption::Info(r) | ClientOption::Go(r) => {
                assert!(r.name.len() <= proto::MAX_STRING_LEN);
                assert_eq!(body.len(), 4 + r.name.len() + 2 + 2 * r.requests.len());
            }
            _ => {}
        }
    }
    if let Ok(r) = proto::parse_info_request(data) {
        assert_eq!(data.len(), 4 + r.name.len() + 2 + 2 * r.requests.len());
    }
}

fuzz_target!(|data: &[u8]| {
    check_options(data);
    common::run_connection(data.to_vec());
});
