//! A YAML syntax error in our words: where it is (the key path of the line it is in, with
//! the line and column), what probably went wrong, and the parser's own words last.
//!
//! The key path is worked out from the text above the error, by indentation: a document
//! that does not parse has no tree to ask. It follows block mappings and lists (what
//! configuration files are written in) and gives up quietly on anything else.

/// The error's location (`upstreams[1].name, line 20 column 10`) and its message.
pub(super) fn describe(text: &str, error: &serde_yaml::Error) -> (String, String) {
    let full = error.to_string();
    // libyaml's words come before its position: "<problem> at line L column C, while ...".
    let problem = full.split(" at line ").next().unwrap_or(&full).trim();
    let Some(location) = error.location() else {
        return (String::new(), format!("not valid YAML: {problem}"));
    };
    let (line, column) = (location.line(), location.column());
    let place = match key_path(text, line) {
        path if path.is_empty() => format!("line {line} column {column}"),
        path => format!("{path}, line {line} column {column}"),
    };
    let message = match hint(problem) {
        Some(hint) => format!("not valid YAML: {hint} (the parser says: {problem})"),
        None => format!("not valid YAML: {problem}"),
    };
    (place, message)
}

/// What a libyaml problem usually means in a configuration file.
fn hint(problem: &str) -> Option<&'static str> {
    let hints = [
        (
            "mapping values are not allowed",
            "a `field: value` where none can start; is this line indented deeper than the \
             field above it, or does a value hold ': ' and need quotes?",
        ),
        (
            "did not find expected '-' indicator",
            "this line is indented less than the list item it belongs to, or more than the \
             list; the fields of one item line up under each other",
        ),
        (
            "did not find expected key",
            "this line's indentation does not match its neighbours'; the fields of one \
             mapping line up under each other",
        ),
        (
            "tab character",
            "a tab character; YAML indents with spaces only",
        ),
        (
            "cannot start any token",
            "a value starts with a character YAML reserves (such as @ or `); put it in quotes",
        ),
        (
            "end of stream",
            "the file ends inside something still open, such as a quoted value",
        ),
        (
            "did not find expected node content",
            "a value is missing here, or starts with a character that needs quotes",
        ),
        (
            "duplicate entry",
            "a field is written twice in the same mapping",
        ),
    ];
    hints
        .iter()
        .find(|(words, _)| problem.contains(words))
        .map(|(_, hint)| *hint)
}

/// One open level of the document above the error: a field, or an item of a list.
struct Frame {
    /// The column the field name or the `-` is at.
    indent: usize,
    segment: Segment,
    /// List items seen so far directly under it.
    items: usize,
}

enum Segment {
    Field(String),
    Item(usize),
}

/// The key path (`upstreams[1].name`) that line `line` (1-based) is inside: the levels the
/// lines above it opened, less those the line's own indentation closes.
fn key_path(text: &str, line: usize) -> String {
    let mut stack: Vec<Frame> = Vec::new();
    // A `|` or `>` value: the lines indented past this column are its text.
    let mut block_text: Option<usize> = None;
    for raw in text.lines().take(line.saturating_sub(1)) {
        let content = raw.trim_start_matches(' ');
        let indent = raw.len() - content.len();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if let Some(column) = block_text {
            if indent > column {
                continue;
            }
            block_text = None;
        }
        if content.starts_with("---") {
            stack.clear();
            continue;
        }
        if let Some(column) = open(&mut stack, indent, content) {
            block_text = Some(column);
        }
    }
    if let Some(raw) = text.lines().nth(line.saturating_sub(1)) {
        let content = raw.trim_start_matches(' ');
        // A tab in the indentation has no column to compare: the levels stay open.
        if !content.is_empty() && !content.starts_with('\t') {
            close(&mut stack, raw.len() - content.len());
        }
    }
    let mut path = String::new();
    for frame in &stack {
        match &frame.segment {
            Segment::Field(name) if path.is_empty() => path.push_str(name),
            Segment::Field(name) => {
                path.push('.');
                path.push_str(name);
            }
            Segment::Item(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// Takes in one line; the column of its field when its value is a `|` or `>` text block.
fn open(stack: &mut Vec<Frame>, mut indent: usize, mut content: &str) -> Option<usize> {
    while content == "-" || content.starts_with("- ") {
        // A list item closes what is deeper, and the previous item at its column.
        while stack.last().is_some_and(|top| {
            top.indent > indent || (top.indent == indent && matches!(top.segment, Segment::Item(_)))
        }) {
            stack.pop();
        }
        let index = stack.last_mut().map_or(0, |parent| {
            parent.items += 1;
            parent.items - 1
        });
        stack.push(Frame {
            indent,
            segment: Segment::Item(index),
            items: 0,
        });
        let rest = content[1..].trim_start_matches(' ');
        indent += content.len() - rest.len();
        content = rest;
    }
    let (name, value) = field(content)?;
    close(stack, indent);
    stack.push(Frame {
        indent,
        segment: Segment::Field(name),
        items: 0,
    });
    let value = value.trim_start();
    (value.starts_with('|') || value.starts_with('>')).then_some(indent)
}

/// Closes every level at or past `indent`: a field there is a sibling, not a parent.
fn close(stack: &mut Vec<Frame>, indent: usize) {
    while stack.last().is_some_and(|top| top.indent >= indent) {
        stack.pop();
    }
}

/// A `name: value` (or `name:`) line's name and value; `None` for anything else.
fn field(content: &str) -> Option<(String, &str)> {
    let (name, rest) = match content.chars().next()? {
        quote @ ('"' | '\'') => {
            let end = content[1..].find(quote)? + 1;
            (&content[1..end], &content[end + 1..])
        }
        '{' | '[' | '#' => return None,
        _ => {
            let end = content
                .find(": ")
                .or_else(|| content.strip_suffix(':').map(str::len))?;
            (&content[..end], &content[end..])
        }
    };
    let value = rest.strip_prefix(':')?;
    Some((name.trim().to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_follows_fields_and_list_items() {
        let text = "listen: x\nupstreams:\n  - name: a\n    url: u\n  - name: b\n    url: v\n    headers:\n      x: 1\n";
        assert_eq!(key_path(text, 4), "upstreams[0]");
        assert_eq!(key_path(text, 6), "upstreams[1]");
        assert_eq!(key_path(text, 8), "upstreams[1].headers");
        assert_eq!(key_path(text, 2), "");
    }

    #[test]
    fn items_at_their_parents_column_count_too() {
        let text = "models:\n- id: a\n- id: b\n  upstream: u\n";
        assert_eq!(key_path(text, 4), "models[1]");
    }

    #[test]
    fn text_blocks_are_skipped() {
        let text = "keys:\n  - name: k\n    note: |\n      - not: an item\n    sha256: x\n";
        assert_eq!(key_path(text, 5), "keys[0]");
    }
}
