use super::*;

fn form(model_last: bool) -> Vec<u8> {
    let file = "--XyZ\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\ncontent-type: audio/wav\r\n\r\nRIFF--XyZ--\r\n-- XyZ\r\n";
    let model = "--XyZ\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n";
    let stream = "--XyZ\r\ncontent-disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n";
    let parts = if model_last {
        [file, stream, model]
    } else {
        [model, file, stream]
    };
    format!("{}--XyZ--\r\n", parts.concat()).into_bytes()
}

fn scan_in(body: &[u8], chunk: usize) -> Result<Form, RequestError> {
    let mut scanner = Scanner::new(b"XyZ");
    for piece in body.chunks(chunk) {
        scanner.feed(piece)?;
    }
    scanner.finish()
}

#[test]
fn the_model_is_found_wherever_it_is_and_however_the_body_is_cut() {
    for model_last in [false, true] {
        let body = form(model_last);
        for chunk in [1, 2, 3, 7, 64, body.len()] {
            let form = scan_in(&body, chunk).unwrap();
            assert_eq!(form.model, "whisper-1", "chunks of {chunk}");
            assert!(form.stream);
            let span = form.model_span.start as usize..form.model_span.end as usize;
            assert_eq!(
                &body[span], b"whisper-1",
                "the span is the value, chunks of {chunk}"
            );
        }
    }
}

#[test]
fn nothing_but_line_breaks_may_follow_the_closing_boundary() {
    let mut body = form(true);
    assert!(scan_in(&body, 3).is_ok());
    body.extend_from_slice(b"\r\n \r\n");
    assert!(scan_in(&body, 3).is_ok(), "line breaks and spaces");
    body.extend_from_slice(
        b"--XyZ\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nother\r\n--XyZ--\r\n",
    );
    assert!(
        matches!(scan_in(&body, 3), Err(RequestError::InvalidForm { .. })),
        "a part after the end is refused: a splitting parser would read it"
    );
}

#[test]
fn stream_is_read_as_a_form_parser_reads_a_boolean_and_values_are_never_cut() {
    let stream = |value: &str| {
        scan_in(
            &parts(&[
                ("content-disposition: form-data; name=model", "whisper"),
                ("content-disposition: form-data; name=stream", value),
            ]),
            4,
        )
        .map(|form| form.stream)
    };
    assert_eq!(stream("1"), Ok(true));
    assert_eq!(stream("ON"), Ok(true));
    assert_eq!(stream("false"), Ok(false));
    assert_eq!(stream("maybe").unwrap_err().param(), Some("stream"));
    let long = format!("whisper{}", " ".repeat(MAX_FIELD_BYTES));
    let refused = scan_in(
        &parts(&[("content-disposition: form-data; name=model", &long)]),
        64,
    )
    .unwrap_err();
    assert_eq!(
        (refused.code(), refused.param()),
        ("invalid_parameter", Some("model"))
    );
}

#[test]
fn broken_forms_are_refused() {
    let body = form(true);
    let truncated = scan_in(&body[..body.len() - 10], 5).unwrap_err();
    assert_eq!(truncated.code(), "invalid_request");
    let no_model = b"--XyZ\r\ncontent-disposition: form-data; name=\"file\"; filename=\"model\"\r\n\r\nx\r\n--XyZ--";
    assert_eq!(
        scan_in(no_model, 4).unwrap_err(),
        RequestError::MissingParameter { param: "model" },
        "a file named model is not the model field"
    );
    let garbage = b"--XyZ garbage";
    assert_eq!(scan_in(garbage, 3).unwrap_err().code(), "invalid_request");
}

/// A form of the given parts (head lines, value), closed.
fn parts(parts: &[(&str, &str)]) -> Vec<u8> {
    let mut body = String::new();
    for (head, value) in parts {
        body.push_str(&format!("--XyZ\r\n{head}\r\n\r\n{value}\r\n"));
    }
    body.push_str("--XyZ--\r\n");
    body.into_bytes()
}

/// One part of a test form: its head lines and its value.
type Piece<'a> = (&'a str, &'a str);

fn refusal(body: &[u8]) -> (String, Option<String>) {
    let error = scan_in(body, 5).unwrap_err();
    (error.code().to_owned(), error.param().map(str::to_owned))
}

#[test]
fn forms_two_parsers_could_read_differently_are_refused() {
    let model = "content-disposition: form-data; name=\"model\"";
    let stream = "content-disposition: form-data; name=stream";
    let cases: [(&[Piece], Option<&str>); 7] = [
        (&[(model, "a"), (model, "b")], Some("model")),
        (&[(stream, "true"), (model, "a"), (stream, "false")], Some("stream")),
        (
            &[
                (model, "a"),
                ("content-disposition: form-data; name=\"model\"; filename=\"m\"", "b"),
            ],
            Some("model"),
        ),
        (
            &[(
                "content-disposition: form-data; name=\"x\"\r\nContent-Disposition: form-data; name=\"model\"",
                "b",
            )],
            None,
        ),
        (&[("content-disposition: form-data; name*=UTF-8''model", "b")], None),
        (&[("content-disposition: form-data; name=\"a\"; name=\"model\"", "b")], None),
        (&[("content-disposition: form-data;\r\n name=\"model\"", "b")], None),
    ];
    for (form, param) in cases {
        assert_eq!(
            refusal(&parts(form)),
            ("invalid_request".to_owned(), param.map(str::to_owned)),
            "{form:?} is refused"
        );
    }
}

#[test]
fn parameters_follow_the_quoted_string_rules() {
    // `name="x;name=model"` is one name, `x;name=model`: not the model field.
    let hidden = parts(&[
        ("content-disposition: form-data; name=\"model\"", "whisper"),
        (
            "content-disposition: form-data; name=\"x;name=model\"",
            "secret",
        ),
    ]);
    assert_eq!(scan_in(&hidden, 3).unwrap().model, "whisper");
    let escaped = parts(&[(
        "content-disposition: form-data; name=\"mo\\del\"; x=\"a \\\"b\\\".wav\"",
        "whisper",
    )]);
    assert_eq!(
        scan_in(&escaped, 4).unwrap().model,
        "whisper",
        "a backslash escape stands for its character"
    );
}

#[test]
fn the_boundary_comes_from_the_content_type() {
    assert_eq!(
        boundary(Some(b"multipart/form-data; boundary=\"ab c\"")).unwrap(),
        b"ab c"
    );
    assert_eq!(
        boundary(Some(b"application/json")).unwrap_err(),
        RequestError::UnsupportedMediaType
    );
    assert_eq!(
        boundary(Some(b"multipart/form-data")).unwrap_err().code(),
        "invalid_request"
    );
    assert_eq!(
        boundary(Some(b"multipart/form-data; boundary=----=_Part_0.1")).unwrap(),
        b"----=_Part_0.1",
        "a bare boundary with characters beyond a token"
    );
    for ambiguous in [
        &b"multipart/form-data; boundary=a; boundary=b"[..],
        b"multipart/form-data; boundary=\"a;boundary=b\"; Boundary=c",
        b"multipart/form-data; boundary*=UTF-8''a",
    ] {
        let error = boundary(Some(ambiguous)).unwrap_err();
        assert!(
            matches!(error, RequestError::InvalidForm { .. }),
            "{:?}: {error:?}",
            String::from_utf8_lossy(ambiguous)
        );
    }
    assert_eq!(
        boundary(Some(b"multipart/form-data; boundary=\"a;boundary=b\"")).unwrap(),
        b"a;boundary=b",
        "a quoted semicolon is part of the boundary"
    );
}
