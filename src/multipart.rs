//! `multipart/form-data` bodies (audio uploads), read as they stream. The gateway needs the
//! `model` field (and `stream`), which may come after a file part of many megabytes: the
//! scanner is fed the body chunk by chunk while the body itself goes to a spool
//! (`spool.rs`), and keeps only a small window, the part headers and the two field values.
//!
//! It checks the framing as it goes: a body without a boundary, one that ends before its
//! closing delimiter, a part without headers, or one without a `model` field is refused
//! before anything reaches an upstream. Parsers disagree on which copy of a repeated field
//! wins, so a form the gateway and its upstream could read differently is refused too: a
//! second `model` or `stream` part, a part with two `Content-Disposition` fields, a folded
//! header line, a `name*` parameter. Parameters are read with the quoted-string rules of
//! RFC 7578 and RFC 9110 (`name="x;name=model"` is the name `x;name=model`).

use crate::error::RequestError;
use part_head::part_of;
use std::ops::Range;

mod part_head;

/// Longest part head (its header lines) accepted.
const MAX_PART_HEAD_BYTES: usize = 16 << 10;
/// Longest `model` or `stream` value accepted (a longer one is refused, never cut).
const MAX_FIELD_BYTES: usize = 1024;
/// RFC 2046: a boundary is 1 to 70 characters.
const MAX_BOUNDARY_BYTES: usize = 70;

/// What the gateway needs of a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    pub model: String,
    /// Byte range of the `model` value inside the body, for the rename.
    pub model_span: Range<u64>,
    pub stream: bool,
}

/// The boundary of a `multipart/form-data` content type; 415 for another media type.
pub fn boundary(content_type: Option<&[u8]>) -> Result<Vec<u8>, RequestError> {
    let value = content_type.ok_or(RequestError::UnsupportedMediaType)?;
    let text = std::str::from_utf8(value).map_err(|_| RequestError::UnsupportedMediaType)?;
    let essence = text.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("multipart/form-data") {
        return Err(RequestError::UnsupportedMediaType);
    }
    let parameters = part_head::parameters(text)
        .ok_or(malformed("its content type's parameters are not valid"))?;
    let mut boundary = None;
    for (name, value) in parameters {
        let name = name.to_ascii_lowercase();
        // Two boundaries: one parser splits the body at the first, another at the last.
        if name == "boundary" && boundary.replace(value).is_some() {
            return Err(ambiguous(None, "its content type names two boundaries"));
        }
        if name.starts_with("boundary*") {
            return Err(ambiguous(
                None,
                "its content type has a boundary* parameter",
            ));
        }
    }
    let boundary = boundary
        .filter(|b| !b.is_empty() && b.len() <= MAX_BOUNDARY_BYTES)
        .ok_or(malformed("its content type names no boundary"))?;
    Ok(boundary.into_bytes())
}

fn malformed(detail: &'static str) -> RequestError {
    RequestError::InvalidRequest { detail }
}

/// A form whose fields the gateway and its upstream could read differently.
fn ambiguous(param: Option<&'static str>, detail: &'static str) -> RequestError {
    RequestError::InvalidForm { param, detail }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first delimiter, or inside a part's content.
    Content,
    /// Just after a delimiter: `--` ends the body, a line break starts a part.
    AfterDelimiter,
    /// Reading a part's header lines.
    Head,
    /// After the closing delimiter.
    End,
}

/// Which field a part's content is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Model,
    Stream,
    Other,
}

impl Field {
    /// The request parameter the field is, if the gateway reads it.
    fn param(self) -> Option<&'static str> {
        match self {
            Field::Model => Some("model"),
            Field::Stream => Some("stream"),
            Field::Other => None,
        }
    }
}

/// A form's `stream` value, read as the upstreams' form parsers read a boolean (FastAPI's,
/// behind vLLM, takes `1`, `yes`, `on`... as true): a value the gateway would read as
/// false and an upstream as true would stream past the capability check.
fn stream_value(value: &str) -> Result<bool, RequestError> {
    const TRUE: [&str; 6] = ["true", "1", "yes", "y", "on", "t"];
    const FALSE: [&str; 6] = ["false", "0", "no", "n", "off", "f"];
    let is = |set: &[&str]| set.iter().any(|v| v.eq_ignore_ascii_case(value));
    match (is(&TRUE), is(&FALSE)) {
        (true, _) => Ok(true),
        (_, true) => Ok(false),
        _ => Err(RequestError::InvalidParameter {
            param: "stream".into(),
            message: "The form field 'stream' must be true or false.".into(),
        }),
    }
}

/// Reads a form's framing and the fields the gateway needs, fed the body in chunks.
pub struct Scanner {
    /// `\r\n--boundary`: the body is read as if it started with a line break, so the first
    /// delimiter looks like every other.
    delimiter: Vec<u8>,
    state: State,
    /// Bytes not yet consumed; `window[0]` is at body offset `window_at` (which starts at
    /// -2 for the line break put in front).
    window: Vec<u8>,
    window_at: i64,
    field: Field,
    /// The current field's value and its start offset.
    value: Vec<u8>,
    value_at: i64,
    model: Option<(String, Range<u64>)>,
    stream: bool,
    /// Parts named `model` and `stream` seen so far (file parts included).
    model_parts: u32,
    stream_parts: u32,
}

impl Scanner {
    pub fn new(boundary: &[u8]) -> Scanner {
        let mut delimiter = b"\r\n--".to_vec();
        delimiter.extend_from_slice(boundary);
        Scanner {
            delimiter,
            state: State::Content,
            window: b"\r\n".to_vec(),
            window_at: -2,
            field: Field::Other,
            value: Vec::new(),
            value_at: 0,
            model: None,
            stream: false,
            model_parts: 0,
            stream_parts: 0,
        }
    }

    /// Takes the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), RequestError> {
        self.window.extend_from_slice(chunk);
        loop {
            let progressed = match self.state {
                State::Content => self.content()?,
                State::AfterDelimiter => self.after_delimiter()?,
                State::Head => self.head()?,
                State::End => self.epilogue()?,
            };
            if !progressed {
                return Ok(());
            }
        }
    }

    /// The fields, once the whole body was fed.
    pub fn finish(self) -> Result<Form, RequestError> {
        if self.state != State::End {
            return Err(malformed(
                "its multipart body ends before its closing boundary",
            ));
        }
        let (model, model_span) = self
            .model
            .ok_or(RequestError::MissingParameter { param: "model" })?;
        Ok(Form {
            model,
            model_span,
            stream: self.stream,
        })
    }

    fn consume(&mut self, n: usize) {
        self.window.drain(..n);
        self.window_at += n as i64;
    }

    /// Content up to the next delimiter (or what surely is not part of one).
    fn content(&mut self) -> Result<bool, RequestError> {
        let found = memchr::memmem::find(&self.window, &self.delimiter);
        let end = match found {
            Some(at) => at,
            // The last bytes may start a delimiter that the next chunk completes.
            None => self.window.len().saturating_sub(self.delimiter.len() - 1),
        };
        if let Some(param) = self.field.param() {
            // A value read in part would be checked as one thing and run as another.
            if self.value.len() + end > MAX_FIELD_BYTES {
                return Err(RequestError::InvalidParameter {
                    param: param.into(),
                    message: format!(
                        "The form field '{param}' is longer than {MAX_FIELD_BYTES} bytes."
                    ),
                });
            }
            self.value.extend_from_slice(&self.window[..end]);
        }
        self.consume(end);
        match found {
            Some(_) => {
                self.close_field()?;
                self.consume(self.delimiter.len());
                self.state = State::AfterDelimiter;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Notes the value of the part that just ended, if it is one the gateway needs.
    fn close_field(&mut self) -> Result<(), RequestError> {
        let value = String::from_utf8_lossy(&self.value).trim().to_owned();
        let end = self.window_at as u64;
        match self.field {
            Field::Model => {
                let start = self.value_at as u64;
                self.model = Some((value, start..end));
            }
            Field::Stream => self.stream = stream_value(&value)?,
            Field::Other => {}
        }
        self.field = Field::Other;
        self.value.clear();
        Ok(())
    }

    fn after_delimiter(&mut self) -> Result<bool, RequestError> {
        if self.window.len() < 2 {
            return Ok(false);
        }
        if self.window.starts_with(b"--") {
            self.consume(2);
            self.state = State::End;
        } else if self.window.starts_with(b"\r\n") {
            self.consume(2);
            self.state = State::Head;
        } else {
            return Err(malformed(
                "a multipart boundary is followed by neither a part nor the end",
            ));
        }
        Ok(true)
    }

    /// After the closing delimiter: line breaks and spaces only. A parser that splits the
    /// body at every delimiter would read parts that follow it, which this one does not.
    fn epilogue(&mut self) -> Result<bool, RequestError> {
        if self.window.iter().any(|b| !b" \t\r\n".contains(b)) {
            return Err(ambiguous(None, "text follows its closing boundary"));
        }
        self.consume(self.window.len());
        Ok(false)
    }

    fn head(&mut self) -> Result<bool, RequestError> {
        let Some(at) = memchr::memmem::find(&self.window, b"\r\n\r\n") else {
            if self.window.len() > MAX_PART_HEAD_BYTES {
                return Err(malformed("a multipart part's headers are too long"));
            }
            return Ok(false);
        };
        let head = String::from_utf8_lossy(&self.window[..at]).into_owned();
        let part = part_of(&head)?;
        let seen = match part.name.as_deref() {
            Some("model") => Some((&mut self.model_parts, "model")),
            Some("stream") => Some((&mut self.stream_parts, "stream")),
            _ => None,
        };
        if let Some((count, name)) = seen {
            *count += 1;
            if *count > 1 {
                return Err(ambiguous(
                    Some(name),
                    "it has more than one part of this name",
                ));
            }
        }
        self.field = part.field();
        self.consume(at + 4);
        self.value_at = self.window_at;
        self.state = State::Content;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
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
}
