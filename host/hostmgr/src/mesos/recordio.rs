//! RecordIO, the framing of the Mesos scheduler event stream: each record
//! is its length in decimal ASCII, a `\n`, then that many bytes.
//!
//! The decoder is fed chunks as they come off the wire and yields whole
//! records. Anything that is not RecordIO (a length that is not a number,
//! a zero length, a record larger than the limit, a stream ending inside a
//! record) is an error; the caller drops the stream and subscribes again.

use bytes::{Buf, BytesMut};

/// Records larger than this are refused (a master never sends them; a
/// broken stream might claim to).
pub const MAX_RECORD: usize = 64 << 20;
/// A length prefix has at most this many digits.
const MAX_DIGITS: usize = 20;

/// What is wrong with a stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordIoError {
    /// The length prefix is not a decimal number.
    #[error("recordio: bad length prefix {0:?}")]
    BadLength(String),
    /// A record of length 0 (the scheduler API never sends one).
    #[error("recordio: zero-length record")]
    Empty,
    /// A record larger than [`MAX_RECORD`].
    #[error("recordio: record of {0} bytes is over the limit")]
    TooLarge(usize),
    /// The stream ended inside a record (or its length).
    #[error("recordio: stream ended with {0} bytes of an unfinished record")]
    Truncated(usize),
}

/// Incremental decoder.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
    /// Length of the record being read, once its prefix is complete.
    want: Option<usize>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Appends bytes from the wire.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole record, `Ok(None)` if more bytes are needed.
    pub fn next_record(&mut self) -> Result<Option<bytes::Bytes>, RecordIoError> {
        if self.want.is_none() {
            let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
                if self.buf.len() > MAX_DIGITS {
                    return Err(RecordIoError::BadLength(
                        String::from_utf8_lossy(&self.buf[..MAX_DIGITS]).into_owned(),
                    ));
                }
                return Ok(None);
            };
            let prefix = &self.buf[..nl];
            let text = std::str::from_utf8(prefix).ok().map(str::trim);
            let n = match text {
                Some(t) if !t.is_empty() && t.len() <= MAX_DIGITS && t.bytes().all(|b| b.is_ascii_digit()) => {
                    t.parse::<usize>().map_err(|_| RecordIoError::BadLength(t.to_string()))?
                }
                _ => return Err(RecordIoError::BadLength(String::from_utf8_lossy(prefix).into_owned())),
            };
            if n == 0 {
                return Err(RecordIoError::Empty);
            }
            if n > MAX_RECORD {
                return Err(RecordIoError::TooLarge(n));
            }
            self.buf.advance(nl + 1);
            self.want = Some(n);
        }
        let Some(n) = self.want else { return Ok(None) };
        if self.buf.len() < n {
            return Ok(None);
        }
        self.want = None;
        Ok(Some(self.buf.split_to(n).freeze()))
    }

    /// The stream ended: an error if it ended inside a record.
    pub fn finish(&self) -> Result<(), RecordIoError> {
        if self.buf.is_empty() && self.want.is_none() { Ok(()) } else { Err(RecordIoError::Truncated(self.buf.len())) }
    }
}

/// Frames one record.
pub fn encode(record: &[u8]) -> Vec<u8> {
    let mut out = format!("{}\n", record.len()).into_bytes();
    out.extend_from_slice(record);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_anywhere_come_out_whole() {
        let wire = [encode(b"hello"), encode(b"{\"type\":\"HEARTBEAT\"}")].concat();
        for cut in 0..wire.len() {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                d.push(part);
                while let Some(r) = d.next_record().expect("valid") {
                    got.push(r);
                }
            }
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(&got[0][..], b"hello");
            assert!(d.finish().is_ok());
        }
    }

    #[test]
    fn bad_streams_are_errors() {
        let cases: &[(&[u8], RecordIoError)] = &[
            (b"abc\nxyz", RecordIoError::BadLength("abc".into())),
            (b"0\n", RecordIoError::Empty),
            (b"-5\nhello", RecordIoError::BadLength("-5".into())),
            (b"99999999999\n", RecordIoError::TooLarge(99_999_999_999)),
        ];
        for (wire, want) in cases {
            let mut d = Decoder::new();
            d.push(wire);
            assert_eq!(d.next_record().as_ref().err(), Some(want), "{:?}", String::from_utf8_lossy(wire));
        }
        let mut d = Decoder::new();
        d.push(b"10\nabc");
        assert_eq!(d.next_record(), Ok(None));
        assert_eq!(d.finish(), Err(RecordIoError::Truncated(3)));
        let mut d = Decoder::new();
        d.push(b"123456789012345678901234");
        assert!(matches!(d.next_record(), Err(RecordIoError::BadLength(_))));
    }

    // Fuzz target `recordio` (scripts/fuzz): any bytes, in any chunks, give
    // records or an error, never a panic; framed records come back whole
    // however the stream is cut.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::default())]

        #[test]
        fn fuzz_any_bytes_any_chunks(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256), chunk in 1usize..17) {
            let mut d = Decoder::new();
            for part in bytes.chunks(chunk) {
                d.push(part);
                loop {
                    match d.next_record() {
                        Ok(Some(r)) => proptest::prop_assert!(!r.is_empty() && r.len() <= MAX_RECORD),
                        Ok(None) => break,
                        Err(_) => return Ok(()),
                    }
                }
            }
            let _ = d.finish();
        }

        #[test]
        fn fuzz_framed_records_round_trip(
            records in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64), 0..8),
            chunk in 1usize..33,
        ) {
            let wire: Vec<u8> = records.iter().flat_map(|r| encode(r)).collect();
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for part in wire.chunks(chunk) {
                d.push(part);
                while let Some(r) = d.next_record().map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))? {
                    got.push(r.to_vec());
                }
            }
            proptest::prop_assert_eq!(got, records);
            proptest::prop_assert!(d.finish().is_ok());
        }
    }
}
