//! Server-Sent Events, read incrementally (WHATWG HTML §9.2): Streamable
//! HTTP's stream of messages. Every event is handed on as soon as its
//! blank line arrives; nothing waits for the stream's end.

/// One event: its `data` (the lines joined by `\n`) and its `id`, if any.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
    pub(crate) id: Option<String>,
}

/// An event or line larger than the reader allows: the stream is abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge(pub(crate) usize);

/// Splits a byte stream into events; bounded by `max` bytes per event.
#[derive(Debug)]
pub(crate) struct Reader {
    max: usize,
    line: Vec<u8>,
    /// The last byte was a `\r`: a `\n` right after it ends nothing.
    after_cr: bool,
    event: Event,
    /// Something (a field) was seen since the last dispatch.
    started: bool,
    size: usize,
}

impl Reader {
    pub(crate) fn new(max: usize) -> Self {
        Reader {
            max,
            line: Vec::new(),
            after_cr: false,
            event: Event::default(),
            started: false,
            size: 0,
        }
    }

    /// Reads `chunk`; each event it completes goes to `each`, in order.
    pub(crate) fn push(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(Event),
    ) -> Result<(), TooLarge> {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    if let Some(event) = self.end_line() {
                        each(event);
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.size += 1;
                    if self.size > self.max {
                        return Err(TooLarge(self.max));
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(())
    }

    fn end_line(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.size = 0;
            if !self.started {
                return None;
            }
            self.started = false;
            let mut event = std::mem::take(&mut self.event);
            if event.data.ends_with('\n') {
                event.data.pop();
            }
            return Some(event);
        }
        if line[0] == b':' {
            return None;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => {
                self.event.data.push_str(&value);
                self.event.data.push('\n');
                self.started = true;
            }
            b"event" => {
                self.event.event = Some(value.into_owned());
                self.started = true;
            }
            b"id" if !value.contains('\0') => {
                self.event.id = Some(value.into_owned());
                self.started = true;
            }
            _ => {}
        }
        None
    }
}

/// One event as written on a stream: `id` first, then the data's lines.
pub(crate) fn encode(id: Option<&str>, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 32);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"event: message\n");
    // A JSON message has no raw newline but may have been written with
    // some; each line of it is a data line, so the reader rejoins them.
    for line in data.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&[u8]], max: usize) -> Result<Vec<Event>, TooLarge> {
        let mut reader = Reader::new(max);
        let mut events = Vec::new();
        for chunk in chunks {
            reader.push(chunk, |event| events.push(event))?;
        }
        Ok(events)
    }

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let events = read(
            &[
                b"id: 7\r",
                b"\ndata: {\"a\":",
                b"1}\r\n\r\n: ping\n\nevent: message\ndata:x\ndata: y\n",
                b"\n",
            ],
            1 << 10,
        )
        .unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[1].event.as_deref(), Some("message"));
        assert_eq!(events[1].data, "x\ny");
        // A priming event: an id and empty data.
        let primed = read(&[b"id: 1\ndata:\n\n"], 64).unwrap();
        assert_eq!(
            (primed[0].id.as_deref(), primed[0].data.as_str()),
            (Some("1"), "")
        );
    }

    #[test]
    fn a_huge_event_is_refused_not_buffered() {
        let line = vec![b'x'; 100];
        assert_eq!(read(&[b"data: ", &line], 64), Err(TooLarge(64)));
        let mut many = Vec::new();
        for _ in 0..10 {
            many.extend_from_slice(b"data: 0123456789\n");
        }
        assert_eq!(read(&[&many], 64), Err(TooLarge(64)));
    }

    #[test]
    fn encoded_events_read_back() {
        let encoded = encode(Some("s-1"), b"{\"jsonrpc\":\"2.0\"}");
        let events = read(&[&encoded], 1 << 10).unwrap();
        assert_eq!(events[0].data, "{\"jsonrpc\":\"2.0\"}");
        assert_eq!(events[0].id.as_deref(), Some("s-1"));
    }
}
