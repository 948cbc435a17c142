//! A small `multipart/form-data` reader for the echo backend's audio routes. The backend
//! holds the whole body (it caps bodies at 16 MiB), so this splits a complete body; the
//! gateway itself never does this (DESIGN §4.2: it reads multipart as it streams).

/// One part of a form: its field name, its file name if it is a file, its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Part<'a> {
    pub name: String,
    pub filename: Option<String>,
    pub content: &'a [u8],
}

/// The `boundary` parameter of a `multipart/form-data` media type.
pub fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let media = params.next()?.trim();
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        (!value.is_empty()).then_some(value)
    })
}

/// Every part of a whole body; `None` when it is not well formed.
pub fn parts<'a>(body: &'a [u8], boundary: &str) -> Option<Vec<Part<'a>>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let separator = format!("\r\n--{boundary}").into_bytes();
    let mut at = memchr::memmem::find(body, &delimiter)? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        let rest = rest.strip_prefix(b"\r\n")?;
        let head_end = memchr::memmem::find(rest, b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..head_end]).ok()?;
        let content_start = head_end + 4;
        let content_len = memchr::memmem::find(&rest[content_start..], &separator)?;
        let (name, filename) = disposition(head)?;
        parts.push(Part {
            name,
            filename,
            content: &rest[content_start..content_start + content_len],
        });
        at = body.len() - rest.len() + content_start + content_len + separator.len();
    }
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data` header.
fn disposition(head: &str) -> Option<(String, Option<String>)> {
    let value = head.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    })?;
    let mut name = None;
    let mut filename = None;
    for param in value.split(';').skip(1) {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_string();
        match key.trim() {
            "name" => name = Some(value),
            "filename" => filename = Some(value),
            _ => {}
        }
    }
    Some((name?, filename))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_splits_into_its_fields_and_file() {
        assert_eq!(
            boundary("multipart/form-data; boundary=\"abc\""),
            Some("abc")
        );
        assert_eq!(
            boundary("Multipart/Form-Data;charset=utf-8; boundary=x-1"),
            Some("x-1")
        );
        assert_eq!(boundary("application/json"), None);
        let body = b"preamble\r\n--xyz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--xyz\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--xy\0\r\n--xyz--\r\n";
        let parts = parts(body, "xyz").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0],
            Part {
                name: "model".into(),
                filename: None,
                content: b"whisper"
            }
        );
        assert_eq!(parts[1].filename.as_deref(), Some("a.wav"));
        assert_eq!(
            parts[1].content, b"RIFF\r\n--xy\0",
            "bytes like the boundary stay"
        );
        assert_eq!(super::parts(b"--xyz\r\nno end", "xyz"), None);
    }
}
