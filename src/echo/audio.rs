//! The audio routes. `POST /v1/audio/speech` answers a WAV of silence as long as the input
//! would take to say (10 ms a character, at most 5 s). `POST /v1/audio/transcriptions` and
//! `/translations` read the multipart form and describe the upload ("received N bytes of
//! audio") in the `response_format` asked for, or as `transcript.text.delta` and
//! `transcript.text.done` events with `stream=true`.

use super::multipart::{boundary, parts};
use super::reply::{spaced, words, Event, Reply};
use bytes::Bytes;
use serde_json::{json, Value};

/// Samples a second of the speech answer: 16-bit mono.
const SAMPLE_RATE: u32 = 8000;
/// Longest speech answer, in samples (5 s).
const MAX_SAMPLES: u32 = 5 * SAMPLE_RATE;

pub fn speech(request: &Value) -> Reply {
    let Some(input) = request["input"].as_str() else {
        return Reply::invalid("input", "'input' must be a string.");
    };
    let samples = (input.chars().count() as u32)
        .saturating_mul(SAMPLE_RATE / 100)
        .min(MAX_SAMPLES);
    Reply::Body {
        status: 200,
        content_type: "audio/wav",
        body: Bytes::from(silent_wav(samples)),
    }
}

/// A PCM WAV file of `samples` 16-bit mono samples of silence.
fn silent_wav(samples: u32) -> Vec<u8> {
    let data_bytes = samples * 2;
    let mut wav = Vec::with_capacity(44 + data_bytes as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // size of the fmt chunk
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&SAMPLE_RATE.to_le_bytes());
    wav.extend_from_slice(&(SAMPLE_RATE * 2).to_le_bytes()); // bytes a second
    wav.extend_from_slice(&2u16.to_le_bytes()); // bytes a frame
    wav.extend_from_slice(&16u16.to_le_bytes()); // bits a sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_bytes.to_le_bytes());
    wav.resize(44 + data_bytes as usize, 0);
    wav
}

/// Which of the two multipart routes was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Transcribe,
    Translate,
}

pub fn transcribe(task: Task, content_type: Option<&str>, body: &[u8]) -> Reply {
    let Some(boundary) = content_type.and_then(boundary) else {
        return Reply::error(
            400,
            "The body must be multipart/form-data with a boundary.",
            None,
            Some("invalid_content_type"),
        );
    };
    let Some(parts) = parts(body, boundary) else {
        return Reply::error(400, "The multipart body is malformed.", None, None);
    };
    let field = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name && p.filename.is_none())
            .and_then(|p| std::str::from_utf8(p.content).ok())
    };
    if field("model").is_none_or(str::is_empty) {
        return Reply::invalid("model", "The form has no 'model' field.");
    }
    let Some(file) = parts
        .iter()
        .find(|p| p.name == "file" && p.filename.is_some())
    else {
        return Reply::invalid("file", "The form has no 'file' part.");
    };
    let text = format!("received {} bytes of audio", file.content.len());
    // One input token a KiB of audio, one output token a word.
    let input_tokens = file.content.len().div_ceil(1024);
    let output_tokens = text.split_whitespace().count();
    let usage = json!({
        "type": "tokens", "input_tokens": input_tokens, "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    });
    if field("stream") == Some("true") {
        let mut events: Vec<Event> = words(&text)
            .iter()
            .enumerate()
            .map(|(i, word)| {
                let delta = json!({"type": "transcript.text.delta", "delta": spaced(i, word)});
                Event::data(&delta, true)
            })
            .collect();
        let done = json!({"type": "transcript.text.done", "text": text, "usage": usage});
        events.push(Event::data(&done, false));
        return Reply::Stream(events);
    }
    let plain = |content_type: &'static str, body: String| Reply::Body {
        status: 200,
        content_type,
        body: Bytes::from(body),
    };
    match field("response_format").unwrap_or("json") {
        "json" if task == Task::Transcribe => Reply::json(&json!({"text": text, "usage": usage})),
        "json" => Reply::json(&json!({"text": text})),
        "verbose_json" => Reply::json(&json!({
            "task": if task == Task::Transcribe { "transcribe" } else { "translate" },
            "language": "english", "duration": 0.0, "text": text, "segments": [],
        })),
        "text" => plain("text/plain; charset=utf-8", format!("{text}\n")),
        "srt" => plain(
            "text/plain; charset=utf-8",
            format!("1\n00:00:00,000 --> 00:00:01,000\n{text}\n\n"),
        ),
        "vtt" => plain(
            "text/vtt; charset=utf-8",
            format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n\n"),
        ),
        _ => Reply::invalid(
            "response_format",
            "'response_format' must be json, text, srt, verbose_json or vtt.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::reply::tests::{body_json, stream_data};

    fn form(fields: &[(&str, &str)], file: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend_from_slice(
                format!(
                    "--b\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        body.extend_from_slice(
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n",
        );
        body.extend_from_slice(file);
        body.extend_from_slice(b"\r\n--b--\r\n");
        body
    }

    const FORM: Option<&str> = Some("multipart/form-data; boundary=b");

    #[test]
    fn speech_is_a_valid_wav_of_silence() {
        let Reply::Body {
            content_type, body, ..
        } = speech(&json!({"input": "hello"}))
        else {
            panic!("a body");
        };
        assert_eq!(content_type, "audio/wav");
        assert_eq!(&body[..4], b"RIFF");
        assert_eq!(&body[8..16], b"WAVEfmt ");
        let riff_size = u32::from_le_bytes(body[4..8].try_into().unwrap());
        assert_eq!(
            riff_size as usize,
            body.len() - 8,
            "the RIFF size is the file's"
        );
        assert_eq!(body.len(), 44 + 5 * 80 * 2, "10 ms a character at 8 kHz");
    }

    #[test]
    fn a_transcription_describes_the_upload() {
        let body = form(&[("model", "whisper")], &[7; 2000]);
        let (status, json) = body_json(transcribe(Task::Transcribe, FORM, &body));
        assert_eq!(status, 200);
        assert_eq!(json["text"], "received 2000 bytes of audio");
        assert_eq!(json["usage"]["input_tokens"], 2);
        let text = form(&[("model", "w"), ("response_format", "text")], b"x");
        let Reply::Body { body, .. } = transcribe(Task::Translate, FORM, &text) else {
            panic!("a body");
        };
        assert_eq!(&body[..], b"received 1 bytes of audio\n");
        let streamed = form(&[("stream", "true"), ("model", "w")], b"abc");
        let (events, done) = stream_data(transcribe(Task::Transcribe, FORM, &streamed));
        assert!(!done);
        let deltas: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
        assert_eq!(deltas, "received 3 bytes of audio");
        let last = events.last().unwrap();
        assert_eq!(last["type"], "transcript.text.done");
        assert_eq!(last["text"], deltas);
    }

    #[test]
    fn a_form_without_model_or_file_is_400() {
        let no_model = form(&[], b"x");
        let (status, json) = body_json(transcribe(Task::Transcribe, FORM, &no_model));
        assert_eq!((status, &json["error"]["param"]), (400, &json!("model")));
        let no_file = b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nw\r\n--b--";
        let (_, json) = body_json(transcribe(Task::Transcribe, FORM, no_file));
        assert_eq!(json["error"]["param"], "file");
        let (status, _) = body_json(transcribe(
            Task::Transcribe,
            Some("application/json"),
            b"{}",
        ));
        assert_eq!(status, 400);
    }
}
