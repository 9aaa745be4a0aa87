//! Property tests: hostile clients must never crash the server nor touch bytes
//! outside the export, and well-formed-but-hostile requests must change exactly
//! the bytes they address when (and only when) the server reports success.
//!
//! The export is a `blockdev::GuardedWindow` of `N` bytes between guard zones of
//! `G` bytes; it forwards offsets *without* checking them, so any request the
//! server failed to bounds-check lands in a guard zone, where the test sees it
//! (a block status query outside the window is recorded there too).

use std::sync::Arc;
use std::time::Duration;

use blockdev::GuardedWindow;
use nbd::proto::*;
use nbd::{Export, MapRegistry, Server, ServerConfig};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const N: u64 = 64 * 1024;
const G: u64 = 16 * 1024;
const MAXP: u32 = 8192;

fn server(dev: Arc<GuardedWindow>) -> Server {
    let reg = MapRegistry::new();
    reg.insert(Export {
        name: "w".into(),
        description: String::new(),
        dev,
        pace: None,
        gate: None,
        owner: None,
    });
    reg.set_default(Some("w"));
    Server::new(
        Arc::new(reg),
        ServerConfig {
            max_payload: MAXP,
            ..Default::default()
        },
    )
}

/// `NBD_OPT_SET_META_CONTEXT` data selecting `base:allocation` on the default export.
fn set_meta_data() -> Vec<u8> {
    let q = META_BASE_ALLOCATION.as_bytes();
    let mut d = 0u32.to_be_bytes().to_vec();
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&(q.len() as u32).to_be_bytes());
    d.extend_from_slice(q);
    d
}

/// A handshake into transmission; with `meta` (and `structured`), selecting
/// `base:allocation` first.
fn handshake_bytes(structured: bool, meta: bool) -> Vec<u8> {
    let mut v = 3u32.to_be_bytes().to_vec();
    let mut opt = |o: u32, d: &[u8]| {
        v.extend_from_slice(&IHAVEOPT.to_be_bytes());
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(d.len() as u32).to_be_bytes());
        v.extend_from_slice(d);
    };
    if structured {
        opt(OPT_STRUCTURED_REPLY, &[]);
    }
    if meta {
        opt(OPT_SET_META_CONTEXT, &set_meta_data());
    }
    opt(OPT_GO, &[0, 0, 0, 0, 0, 0]);
    v
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `input` as the whole client stream (then closes it), discards the
/// replies, and returns once the server's connection task has ended.
fn blast(dev: Arc<GuardedWindow>, input: Vec<u8>) {
    rt().block_on(async move {
        let (client, srv_end) = tokio::io::duplex(64 * 1024);
        let srv = server(dev);
        let task = tokio::spawn(async move { srv.handle(srv_end).await });
        let (mut rd, mut wr) = tokio::io::split(client);
        let sink = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let _ = wr.write_all(&input).await;
        let _ = wr.shutdown().await;
        let res = tokio::time::timeout(Duration::from_secs(20), task).await;
        let joined = res.expect("server connection did not end after the client closed");
        assert!(joined.is_ok(), "server connection task panicked");
        drop(wr);
        let _ = tokio::time::timeout(Duration::from_secs(5), sink).await;
    });
}

#[derive(Debug, Clone)]
struct Req {
    kind: u16,
    flags: u16,
    offset: u64,
    len: u32,
    fill: u8,
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..N,
        2 => (N - 4096)..(N + 4096),
        1 => Just(N),
        1 => any::<u64>(),
        1 => (u64::MAX - 2 * G)..=u64::MAX,
    ]
}

fn length() -> impl Strategy<Value = u32> {
    prop_oneof![
        5 => 0u32..5000,
        1 => (MAXP - 2)..(MAXP + 2),
        1 => (N as u32 - 10)..(N as u32 + 10),
        1 => any::<u32>(),
    ]
}

fn kind() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => Just(CMD_WRITE),
        3 => Just(CMD_READ),
        1 => Just(CMD_TRIM),
        1 => Just(CMD_WRITE_ZEROES),
        1 => Just(CMD_FLUSH),
        1 => Just(CMD_CACHE),
        2 => Just(CMD_BLOCK_STATUS),
        1 => 7u16..12,
        1 => any::<u16>(),
    ]
}

fn flags() -> impl Strategy<Value = u16> {
    prop_oneof![
        6 => Just(0u16),
        2 => Just(CMD_FLAG_FUA),
        1 => Just(CMD_FLAG_NO_HOLE),
        1 => Just(CMD_FLAG_DF),
        1 => Just(CMD_FLAG_REQ_ONE),
        1 => any::<u16>(),
    ]
}

fn req() -> impl Strategy<Value = Req> {
    (kind(), flags(), offset(), length(), any::<u8>()).prop_map(
        |(kind, flags, offset, len, fill)| Req {
            kind,
            flags,
            offset,
            len,
            fill,
        },
    )
}

fn payload(r: &Req) -> Vec<u8> {
    (0..r.len as usize).map(|i| r.fill ^ (i as u8)).collect()
}

/// The expected outcome from the protocol spec, written independently of the
/// server: `Err(None)` is a hang-up, `Err(Some(errno))` an error reply.
fn expected(r: &Req, structured: bool, meta: bool) -> Result<(), Option<u32>> {
    let in_range = r
        .offset
        .checked_add(u64::from(r.len))
        .is_some_and(|e| e <= N);
    let flags_ok = |allowed: u16| r.flags & !allowed == 0;
    let ok = |cond: bool| if cond { Ok(()) } else { Err(Some(EINVAL)) };
    match r.kind {
        CMD_WRITE if r.len > MAXP => Err(None),
        CMD_WRITE => ok(flags_ok(CMD_FLAG_FUA) && in_range),
        CMD_READ => {
            let allowed = CMD_FLAG_FUA | if structured { CMD_FLAG_DF } else { 0 };
            if !flags_ok(allowed) {
                Err(Some(EINVAL))
            } else if r.len > MAXP {
                Err(Some(EOVERFLOW))
            } else {
                ok(in_range)
            }
        }
        CMD_FLUSH => ok(flags_ok(CMD_FLAG_FUA)),
        CMD_TRIM | CMD_CACHE => ok(flags_ok(CMD_FLAG_FUA) && in_range),
        CMD_WRITE_ZEROES => ok(flags_ok(CMD_FLAG_FUA | CMD_FLAG_NO_HOLE) && in_range),
        // Only with base:allocation selected, and never for nothing.
        CMD_BLOCK_STATUS => {
            ok(meta && flags_ok(CMD_FLAG_FUA | CMD_FLAG_REQ_ONE) && in_range && r.len > 0)
        }
        _ => Err(Some(EINVAL)),
    }
}

/// Reads one reply: (error, cookie, data).
/// Reads one reply: (error, cookie, data). `read_len` says, by cookie, how many
/// data bytes follow a successful simple reply (replies may come out of order:
/// a flush or FUA reply waits for its sync).
async fn reply<R: AsyncReadExt + Unpin>(
    rd: &mut R,
    read_len: impl Fn(u64) -> Option<u32>,
) -> (u32, u64, Vec<u8>) {
    let mut magic = [0u8; 4];
    rd.read_exact(&mut magic).await.unwrap();
    match u32::from_be_bytes(magic) {
        SIMPLE_REPLY_MAGIC => {
            let mut h = [0u8; 12];
            rd.read_exact(&mut h).await.unwrap();
            let err = u32::from_be_bytes(h[..4].try_into().unwrap());
            let cookie = u64::from_be_bytes(h[4..12].try_into().unwrap());
            let mut data = vec![
                0u8;
                if err == 0 {
                    read_len(cookie).unwrap_or(0) as usize
                } else {
                    0
                }
            ];
            rd.read_exact(&mut data).await.unwrap();
            (err, cookie, data)
        }
        STRUCTURED_REPLY_MAGIC => {
            let mut h = [0u8; 16];
            rd.read_exact(&mut h).await.unwrap();
            let flags = u16::from_be_bytes(h[..2].try_into().unwrap());
            let kind = u16::from_be_bytes(h[2..4].try_into().unwrap());
            let cookie = u64::from_be_bytes(h[4..12].try_into().unwrap());
            let len = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let mut p = vec![0u8; len as usize];
            rd.read_exact(&mut p).await.unwrap();
            assert_ne!(
                flags & REPLY_FLAG_DONE,
                0,
                "one chunk per reply from this server"
            );
            match kind {
                REPLY_TYPE_OFFSET_DATA => (0, cookie, p[8..].to_vec()),
                REPLY_TYPE_NONE => (0, cookie, Vec::new()),
                REPLY_TYPE_BLOCK_STATUS => (0, cookie, p),
                REPLY_TYPE_ERROR => (
                    u32::from_be_bytes(p[..4].try_into().unwrap()),
                    cookie,
                    Vec::new(),
                ),
                other => panic!("unexpected chunk type {other}"),
            }
        }
        m => panic!("bad reply magic {m:#x}"),
    }
}

/// Runs `reqs` against a fresh window export, checking every reply against the
/// spec and a byte model of the export; returns the final device.
fn run_requests(reqs: Vec<Req>, structured: bool, meta: bool) -> Result<(), TestCaseError> {
    let meta = meta && structured;
    let dev = Arc::new(GuardedWindow::new(N, G));
    let srv = server(dev.clone());
    let mut model = vec![0u8; N as usize];
    rt().block_on(async {
        let (client, srv_end) = tokio::io::duplex(256 * 1024);
        let task = tokio::spawn(async move { srv.handle(srv_end).await });
        let (mut rd, mut wr) = tokio::io::split(client);
        // Send everything from a separate task, as a pipelining client would.
        let sent = reqs.clone();
        let sender = tokio::spawn(async move {
            wr.write_all(&handshake_bytes(structured, meta))
                .await
                .unwrap();
            for (i, r) in sent.iter().enumerate() {
                let h = RequestHeader {
                    flags: r.flags,
                    kind: r.kind,
                    cookie: i as u64,
                    offset: r.offset,
                    length: r.len,
                };
                if wr.write_all(&encode_request(&h)).await.is_err() {
                    break;
                }
                if r.kind == CMD_WRITE {
                    if r.len > MAXP {
                        break; // The server hangs up here.
                    }
                    if wr.write_all(&payload(r)).await.is_err() {
                        break;
                    }
                }
            }
            let disc = RequestHeader {
                flags: 0,
                kind: CMD_DISC,
                cookie: 0,
                offset: 0,
                length: 0,
            };
            let _ = wr.write_all(&encode_request(&disc)).await;
            wr
        });
        // Handshake replies: [STRUCTURED_REPLY ack], GO infos, ACK.
        let mut g = [0u8; 18];
        rd.read_exact(&mut g).await.unwrap();
        let mut acks = 0;
        while acks < 1 + usize::from(structured) + usize::from(meta) {
            let mut h = [0u8; 20];
            rd.read_exact(&mut h).await.unwrap();
            let mut d = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
            rd.read_exact(&mut d).await.unwrap();
            if u32::from_be_bytes(h[12..16].try_into().unwrap()) == REP_ACK {
                acks += 1;
            }
        }
        // Every reply up to a hang-up, in whatever order they come; then checked
        // in request order, which is the order the server executed them in.
        let answered = reqs
            .iter()
            .take_while(|r| expected(r, structured, meta) != Err(None))
            .count();
        let mut got = std::collections::HashMap::new();
        for _ in 0..answered {
            let read_len = |c: u64| {
                reqs.get(c as usize)
                    .filter(|r| r.kind == CMD_READ)
                    .map(|r| r.len)
            };
            let (err, cookie, data) =
                tokio::time::timeout(Duration::from_secs(10), reply(&mut rd, read_len))
                    .await
                    .expect("reply");
            prop_assert!(
                got.insert(cookie, (err, data)).is_none(),
                "two replies for {}",
                cookie
            );
        }
        for (i, r) in reqs.iter().enumerate().take(answered) {
            let exp = expected(r, structured, meta);
            let (err, data) = got.remove(&(i as u64)).expect("a reply for every request");
            match exp {
                Ok(()) => prop_assert_eq!(err, 0, "request {:?} should succeed", r),
                Err(Some(e)) => prop_assert_eq!(err, e, "request {:?}", r),
                Err(None) => unreachable!(),
            }
            if err != 0 {
                continue;
            }
            // Only range commands get here with a range; FLUSH ignores its fields.
            let range = || r.offset as usize..(r.offset + u64::from(r.len)) as usize;
            match r.kind {
                CMD_WRITE => model[range()].copy_from_slice(&payload(r)),
                CMD_TRIM | CMD_WRITE_ZEROES => model[range()].fill(0),
                CMD_READ => prop_assert_eq!(
                    &data[..],
                    &model[range()],
                    "read {:?} returned wrong data",
                    r
                ),
                CMD_BLOCK_STATUS => {
                    // Context 1, then (length, state) descriptors: nonzero,
                    // within the request, one with REQ_ONE, and holes that the
                    // model says read as zeros.
                    prop_assert_eq!(
                        u32::from_be_bytes(data[..4].try_into().unwrap()),
                        META_BASE_ALLOCATION_ID
                    );
                    let descs: Vec<(u64, u32)> = data[4..]
                        .chunks_exact(8)
                        .map(|c| {
                            (
                                u64::from(u32::from_be_bytes(c[..4].try_into().unwrap())),
                                u32::from_be_bytes(c[4..].try_into().unwrap()),
                            )
                        })
                        .collect();
                    prop_assert!(!descs.is_empty() && data.len() == 4 + 8 * descs.len());
                    if r.flags & CMD_FLAG_REQ_ONE != 0 {
                        prop_assert_eq!(descs.len(), 1);
                    }
                    let mut at = r.offset as usize;
                    for (len, state) in descs {
                        prop_assert!(len > 0);
                        let end = at + len as usize;
                        prop_assert!(
                            end <= (r.offset + u64::from(r.len)) as usize,
                            "extent past the request {:?}",
                            r
                        );
                        if state & STATE_ZERO != 0 {
                            prop_assert!(
                                model[at..end].iter().all(|&b| b == 0),
                                "a zero extent holds data: {:?}",
                                r
                            );
                        }
                        at = end;
                    }
                }
                _ => {}
            }
        }
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut rest)).await;
        let _wr = sender.await.unwrap();
        let res = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("server ended");
        prop_assert!(res.is_ok(), "server task panicked");
        Ok(())
    })?;
    prop_assert!(dev.guards_intact(), "bytes outside the export changed");
    prop_assert!(
        dev.window() == model,
        "export content differs from the model"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes as the whole client stream, from the very first byte.
    #[test]
    fn arbitrary_handshake_bytes(input in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let dev = Arc::new(GuardedWindow::new(N, G));
        blast(dev.clone(), input);
        prop_assert!(dev.guards_intact());
        prop_assert!(dev.window().iter().all(|&b| b == 0), "nothing could have been written");
    }

    /// A valid handshake, then a mix of request headers with arbitrary fields,
    /// payload-ish bytes and raw garbage.
    #[test]
    fn arbitrary_transmission_bytes(
        structured in any::<bool>(),
        meta in any::<bool>(),
        parts in proptest::collection::vec(
            prop_oneof![
                3 => req().prop_map(|r| {
                    let h = RequestHeader { flags: r.flags, kind: r.kind, cookie: 1, offset: r.offset, length: r.len };
                    let mut v = encode_request(&h).to_vec();
                    if r.kind == CMD_WRITE && r.len <= MAXP {
                        v.extend(payload(&r));
                    }
                    v
                }),
                1 => proptest::collection::vec(any::<u8>(), 0..64),
            ],
            0..40,
        ),
    ) {
        let dev = Arc::new(GuardedWindow::new(N, G));
        let mut input = handshake_bytes(structured, meta);
        for p in parts {
            input.extend(p);
        }
        blast(dev.clone(), input);
        prop_assert!(dev.guards_intact(), "bytes outside the export changed");
    }

    /// Well-formed but hostile requests: every reply matches the spec, and the
    /// export changes exactly as the successful requests say.
    #[test]
    fn hostile_requests_follow_the_model(
        structured in any::<bool>(),
        meta in any::<bool>(),
        reqs in proptest::collection::vec(req(), 1..40),
    ) {
        run_requests(reqs, structured, meta)?;
    }
}
