//! A small read buffer for the request stream.
//!
//! Unlike `tokio::io::BufReader` it can be asked to hold *at least n* bytes (a
//! whole request header), so the connection loop can decode every request that is
//! already buffered without an `.await`, and hand a write payload that is already
//! buffered to the device straight from the buffer, without a copy. Every read it
//! does is cancel-safe: bytes are only counted once a read has returned them.

use tokio::io::{AsyncRead, AsyncReadExt};

/// A fixed-size buffer over an `AsyncRead`.
pub(crate) struct InBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl InBuf {
    /// A buffer of `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// The buffered, not yet consumed bytes.
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Bytes it can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Number of buffered bytes.
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    /// Drops the first `n` buffered bytes.
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads until at least `need` bytes (at most the capacity) are buffered.
    /// Returns `Ok(false)` if the stream ended first.
    pub(crate) async fn fill<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        need: usize,
    ) -> std::io::Result<bool> {
        debug_assert!(need <= self.buf.len());
        if self.len() >= need {
            return Ok(true);
        }
        if self.buf.len() - self.start < need {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.len() < need {
            let n = r.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return Ok(false);
            }
            self.end += n;
        }
        Ok(true)
    }

    /// Fills `dst` entirely, first from the buffer, then from the stream (large
    /// remainders are read straight into `dst`). Returns `Ok(false)` if the stream
    /// ended first; `dst` is then partly filled.
    pub(crate) async fn read_exact<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        dst: &mut [u8],
    ) -> std::io::Result<bool> {
        let take = self.len().min(dst.len());
        dst[..take].copy_from_slice(&self.data()[..take]);
        self.consume(take);
        let mut done = take;
        if dst.len() - done >= self.buf.len() / 2 {
            while done < dst.len() {
                let n = r.read(&mut dst[done..]).await?;
                if n == 0 {
                    return Ok(false);
                }
                done += n;
            }
            return Ok(true);
        }
        let rest = dst.len() - done;
        if !self.fill(r, rest).await? {
            return Ok(false);
        }
        dst[done..].copy_from_slice(&self.data()[..rest]);
        self.consume(rest);
        Ok(true)
    }

    /// Reads and discards `n` bytes. Returns `Ok(false)` if the stream ended first.
    pub(crate) async fn skip<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        mut n: usize,
    ) -> std::io::Result<bool> {
        loop {
            let take = self.len().min(n);
            self.consume(take);
            n -= take;
            if n == 0 {
                return Ok(true);
            }
            if !self.fill(r, 1).await? {
                return Ok(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn fill_read_exact_skip() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        a.write_all(&data).await.unwrap();
        drop(a);
        let mut ib = InBuf::new(64);
        assert!(ib.fill(&mut b, 10).await.unwrap());
        assert_eq!(&ib.data()[..10], &data[..10]);
        ib.consume(3);
        // Larger than half the buffer: read directly into the destination.
        let mut big = vec![0u8; 100];
        assert!(ib.read_exact(&mut b, &mut big).await.unwrap());
        assert_eq!(&big[..], &data[3..103]);
        let mut small = [0u8; 20];
        assert!(ib.read_exact(&mut b, &mut small).await.unwrap());
        assert_eq!(&small[..], &data[103..123]);
        assert!(ib.skip(&mut b, 500).await.unwrap());
        assert!(ib.fill(&mut b, 60).await.unwrap());
        assert_eq!(&ib.data()[..60], &data[623..683]);
        ib.consume(60);
        assert!(
            !ib.skip(&mut b, 1000).await.unwrap(),
            "stream ends before 1000 bytes"
        );
        assert!(!ib.fill(&mut b, 1).await.unwrap());
    }
}
