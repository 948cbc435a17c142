use super::*;

/// The events a stream gives when read in pieces of `size`, and what is left pending.
fn events_in_pieces(stream: &[u8], size: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut reader = EventReader::default();
    let mut events = Vec::new();
    for piece in stream.chunks(size) {
        reader
            .feed(piece, |event| events.push(event.to_vec()))
            .expect("small events");
    }
    (events, reader.take_rest())
}

#[test]
fn every_line_ending_ends_events_in_pieces_of_any_size() {
    let streams: [(&[u8], &[&[u8]]); 7] = [
        (b"data: a\n\ndata: b\n\n", &[b"data: a\n\n", b"data: b\n\n"]),
        (
            b"data: a\r\n\r\ndata: b\r\n\r\n",
            &[b"data: a\r\n\r\n", b"data: b\r\n\r\n"],
        ),
        (b"data: a\r\rdata: b\r\r", &[b"data: a\r\r", b"data: b\r\r"]),
        // Mixed: an LF line then a CRLF empty line, and an LF line then a CR one.
        (
            b"data: a\n\r\ndata: b\n\r",
            &[b"data: a\n\r\n", b"data: b\n\r"],
        ),
        // A CRLF line then a bare LF empty line.
        (
            b"event: x\r\ndata: a\r\n\ndata: b\r\n\n",
            &[b"event: x\r\ndata: a\r\n\n", b"data: b\r\n\n"],
        ),
        // A CR empty line whose LF comes next belongs to the line end, kept with the stream.
        (b"data: a\r\n\r\n", &[b"data: a\r\n\r\n"]),
        (
            b": comment\n\ndata: a\n\n",
            &[b": comment\n\n", b"data: a\n\n"],
        ),
    ];
    for (stream, expected) in streams {
        for size in 1..=stream.len() {
            let (events, rest) = events_in_pieces(stream, size);
            let mut joined = events.concat();
            joined.extend_from_slice(&rest);
            assert_eq!(joined, stream, "no byte lost or added, pieces of {size}");
            // A CR that ends an event at the end of a piece leaves the LF after it to the
            // next event's bytes: compare what the events say.
            let said = |event: &[u8]| -> Vec<Vec<u8>> {
                lines(event)
                    .map(|line| event[line].to_vec())
                    .filter(|l| !l.is_empty())
                    .collect()
            };
            let got: Vec<_> = events.iter().map(|e| said(e)).collect();
            let want: Vec<_> = expected.iter().map(|e| said(e)).collect();
            assert_eq!(
                got,
                want,
                "{:?} in pieces of {size}",
                String::from_utf8_lossy(stream)
            );
            assert!(
                rest.iter().all(|&b| b == b'\n'),
                "nothing but a line end's LF left"
            );
        }
    }
}

#[test]
fn a_line_without_an_empty_line_after_it_is_not_an_event() {
    let (events, rest) = events_in_pieces(b"data: a\ndata: b\r\ndata: c", 3);
    assert!(events.is_empty());
    assert_eq!(rest, b"data: a\ndata: b\r\ndata: c");
}

#[test]
fn an_event_past_the_bound_is_handed_back_whole_and_reading_stops() {
    let mut reader = EventReader::default();
    let mut events = 0;
    reader.feed(b"data: ok\n\ndata: ", |_| events += 1).unwrap();
    assert_eq!(events, 1);
    let big = vec![b'x'; 64 << 10];
    let mut fed = 8;
    let held = loop {
        match reader.feed(&big, |_| events += 1) {
            Ok(()) => fed += big.len(),
            Err(TooLong(held)) => break held,
        }
        assert!(fed <= MAX_EVENT_BYTES, "never more than the bound held");
    };
    assert_eq!(events, 1, "no event completed");
    assert!(held.starts_with(b"data: xxx"), "from the event's start");
    assert_eq!(held.len(), fed - 2 + big.len(), "every byte of it");
    assert!(reader.is_empty(), "nothing kept");
}

#[test]
fn a_long_event_is_read_in_time_linear_in_its_bytes() {
    // 4 MiB in 1-byte-at-a-time steps of 64 bytes would take minutes if each piece
    // rescanned what is held; here it is a few million byte visits.
    let mut reader = EventReader::default();
    let piece = [b'y'; 64];
    let mut held = 0;
    for _ in 0..(MAX_EVENT_BYTES / 64 - 1) {
        reader.feed(&piece, |_| panic!("no event")).unwrap();
        held += 64;
    }
    let mut got = Vec::new();
    reader.feed(b"\n\n", |e| got.push(e.len())).unwrap();
    assert_eq!(got, vec![held + 2]);
}

#[test]
fn data_values_are_read_in_every_line_ending() {
    for event in [
        &b"event: e\ndata: {\"a\":1}\ndata:2\n\n"[..],
        b"event: e\r\ndata: {\"a\":1}\r\ndata:2\r\n\r\n",
        b"event: e\rdata: {\"a\":1}\rdata:2\r\r",
    ] {
        let values: Vec<&[u8]> = data_values(event).map(|r| &event[r]).collect();
        assert_eq!(values, vec![&b"{\"a\":1}"[..], b"2"]);
    }
}

#[test]
fn an_event_stream_ends_cleanly_only_after_an_empty_line() {
    let tail_of = |pieces: &[&[u8]]| {
        let mut tail = EventTail::default();
        for piece in pieces {
            tail.remember(piece);
        }
        tail.at_event_end()
    };
    assert!(tail_of(&[]), "an empty body");
    for ended in [
        &[&b"data: a\n\n"[..]][..],
        &[b"data: a\r\n\r\n"],
        &[b"data: a\r\r"],
        &[b"data: a\n\r"],
        &[b"data: a\n\r\n"],
        &[b"data: a\r\n\n"],
        &[b"data: a\n", b"\n"],
        &[b"data: a\r\n\r", b"\n"],
    ] {
        assert!(tail_of(ended), "{ended:?} ends an event");
    }
    for inside in [
        &[&b"data: a\n\ndata: {\"ch"[..]][..],
        &[b"data: a\n"],
        &[b"data: a\r\n"],
        &[b"data: a\r"],
    ] {
        assert!(!tail_of(inside), "{inside:?} stops inside an event");
    }
}
