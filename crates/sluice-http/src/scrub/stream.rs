//! A body scrubbed chunk by chunk: a secret split across two chunks is
//! still found, and only the bytes that could begin a secret wait for the
//! next chunk (an event stream's events are not held back).

use std::sync::Arc;

use bytes::Bytes;

use super::secrets::{MASK, Scrubber};

/// The scrubbing state of one body.
#[derive(Debug)]
pub struct StreamScrub {
    scrubber: Arc<Scrubber>,
    /// The end of what came so far that may begin a secret.
    carry: Vec<u8>,
}

impl StreamScrub {
    /// A stream with nothing held back yet.
    pub fn new(scrubber: Arc<Scrubber>) -> Self {
        StreamScrub {
            scrubber,
            carry: Vec::new(),
        }
    }

    /// What of `chunk` (after what was held back) can go to the client now,
    /// masked; possibly empty.
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        let window = if self.carry.is_empty() {
            chunk
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(&chunk);
            Bytes::from(joined)
        };
        let boundary = window.len() - self.scrubber.held_back(&window);
        let (out, end) = self.mask(&window, boundary);
        self.carry = window[end..].to_vec();
        out
    }

    /// The rest, at the end of the body.
    pub fn finish(&mut self) -> Bytes {
        let window = Bytes::from(std::mem::take(&mut self.carry));
        let (out, _) = self.mask(&window, window.len());
        out
    }

    /// `window` masked up to `boundary` (or to the end of a secret that
    /// starts before it), and where that stopped.
    fn mask(&self, window: &Bytes, boundary: usize) -> (Bytes, usize) {
        let mut masked: Option<Vec<u8>> = None;
        let mut at = 0;
        for (start, end) in self.scrubber.matches(window) {
            // Anything starting in the held-back end is decided next time.
            if start >= boundary {
                break;
            }
            let out = masked.get_or_insert_with(|| Vec::with_capacity(window.len()));
            out.extend_from_slice(&window[at..start]);
            out.extend_from_slice(MASK);
            at = end;
        }
        let end = boundary.max(at);
        match masked {
            None => (window.slice(..end), end),
            Some(mut out) => {
                out.extend_from_slice(&window[at..end]);
                (Bytes::from(out), end)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-live-0123456789";

    fn run(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let scrubber = Scrubber::new([SECRET]).unwrap();
        let mut stream = StreamScrub::new(scrubber);
        let mut outs = Vec::new();
        for chunk in chunks {
            outs.push(stream.push(Bytes::copy_from_slice(chunk)).to_vec());
        }
        let rest = stream.finish().to_vec();
        (outs, rest)
    }

    fn whole(chunks: &[&[u8]]) -> String {
        let (outs, rest) = run(chunks);
        let mut all = outs.concat();
        all.extend(rest);
        String::from_utf8(all).unwrap()
    }

    #[test]
    fn a_secret_split_across_chunks_is_masked() {
        assert_eq!(whole(&[b"key=sk-live-01", b"23456789 end"]), "key=*** end");
        // Split at every place, and byte by byte.
        let text = format!("a {SECRET} b {SECRET}");
        for split in 0..=text.len() {
            let (left, right) = text.as_bytes().split_at(split);
            assert_eq!(whole(&[left, right]), "a *** b ***", "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(whole(&bytes), "a *** b ***");
    }

    #[test]
    fn only_a_possible_secret_beginning_waits() {
        let (outs, rest) = run(&[b"data: {\"n\":1}\n\n", b"data: sk-li", b"ve-nope\n\n"]);
        assert_eq!(
            outs[0], b"data: {\"n\":1}\n\n",
            "a whole event goes at once"
        );
        assert_eq!(outs[1], b"data: ", "only the possible secret waits");
        assert_eq!(outs[2], b"sk-live-nope\n\n");
        assert!(rest.is_empty());
    }

    #[test]
    fn a_held_back_beginning_is_released_at_the_end() {
        let (outs, rest) = run(&[b"ends with sk-live-0"]);
        assert_eq!(outs[0], b"ends with ");
        assert_eq!(rest, b"sk-live-0");
    }

    #[test]
    fn clean_chunks_pass_without_a_copy() {
        let scrubber = Scrubber::new([SECRET]).unwrap();
        let mut stream = StreamScrub::new(scrubber);
        let chunk = Bytes::from_static(b"nothing secret here");
        let out = stream.push(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr());
    }
}
