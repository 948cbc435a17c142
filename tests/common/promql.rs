//! A PromQL checker for the subset dashboards use: selectors with label matchers, range
//! selectors (Grafana's `$__rate_interval` included), function calls, aggregations with
//! `by`/`without`, numbers, strings, parentheses and binary operators. It parses an
//! expression whole (or says where it fails) and reports each series it names with the
//! labels used on it, so a test can hold them against what the gateway exports.

/// A series named by a query and the label names used with it: in its matchers, and in the
/// `by`/`without` of an aggregation around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesUse {
    pub metric: String,
    pub labels: Vec<String>,
}

const AGGREGATIONS: [&str; 11] = [
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "group",
];
/// Functions and whether their argument must be a range vector.
const FUNCTIONS: [(&str, bool); 16] = [
    ("rate", true),
    ("irate", true),
    ("increase", true),
    ("delta", true),
    ("deriv", true),
    ("max_over_time", true),
    ("min_over_time", true),
    ("avg_over_time", true),
    ("histogram_quantile", false),
    ("abs", false),
    ("clamp_min", false),
    ("clamp_max", false),
    ("time", false),
    ("timestamp", false),
    ("vector", false),
    ("scalar", false),
];
const BINARY: [&str; 15] = [
    "+", "-", "*", "/", "%", "^", "==", "!=", ">=", "<=", ">", "<", "and", "or", "unless",
];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Number(f64),
    Str(String),
    /// Punctuation and operators.
    Op(String),
    /// What is between `[` and `]`.
    Range(String),
}

fn tokens(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let number = text.parse().map_err(|_| format!("bad number {text}"))?;
            out.push(Token::Number(number));
        } else if c == '"' || c == '\'' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            if i >= chars.len() {
                return Err("a string is not closed".into());
            }
            out.push(Token::Str(chars[start..i].iter().collect()));
            i += 1;
        } else if c == '[' {
            let end = chars[i..]
                .iter()
                .position(|&c| c == ']')
                .ok_or("a range is not closed")?;
            let range: String = chars[i + 1..i + end].iter().collect();
            if !valid_range(&range) {
                return Err(format!("bad range [{range}]"));
            }
            out.push(Token::Range(range));
            i += end + 1;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["==", "!=", ">=", "<=", "=~", "!~"].contains(&two.as_str()) {
                out.push(Token::Op(two));
                i += 2;
            } else if "(){},=+-*/%^<>".contains(c) {
                out.push(Token::Op(c.to_string()));
                i += 1;
            } else {
                return Err(format!("unexpected {c:?}"));
            }
        }
    }
    Ok(out)
}

/// `5m`, `1h30m`, or a Grafana interval variable.
fn valid_range(range: &str) -> bool {
    if ["$__rate_interval", "$__interval", "$__range"].contains(&range) {
        return true;
    }
    let mut digits = false;
    let mut rest = range;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        digits |= split > 0;
        if split == 0 {
            return false;
        }
        rest = &rest[split..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(unit) => rest = &rest[unit.len()..],
            None => return false,
        }
    }
    digits
}

/// What a parsed (sub)expression is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Scalar,
    Instant,
    Range,
    Text,
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    uses: Vec<SeriesUse>,
}

/// Parses `expr`, returning the series it names, or what is wrong with it.
pub fn check(expr: &str) -> Result<Vec<SeriesUse>, String> {
    let mut parser = Parser {
        tokens: tokens(expr)?,
        at: 0,
        uses: Vec::new(),
    };
    let kind = parser.expression()?;
    if parser.at != parser.tokens.len() {
        return Err(format!("unexpected {:?}", parser.tokens[parser.at]));
    }
    if kind == Kind::Range {
        return Err("a range vector cannot be graphed".into());
    }
    Ok(parser.uses)
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn expect_op(&mut self, op: &str) -> Result<(), String> {
        match self.next() {
            Some(Token::Op(o)) if o == op => Ok(()),
            other => Err(format!("expected {op}, found {other:?}")),
        }
    }

    fn binary_op(&self) -> Option<String> {
        match self.peek()? {
            Token::Op(o) if BINARY.contains(&o.as_str()) => Some(o.clone()),
            Token::Ident(i) if ["and", "or", "unless"].contains(&i.as_str()) => Some(i.clone()),
            _ => None,
        }
    }

    fn expression(&mut self) -> Result<Kind, String> {
        let mut kind = self.unary()?;
        while self.binary_op().is_some() {
            self.at += 1;
            if matches!(self.peek(), Some(Token::Ident(i)) if i == "bool") {
                self.at += 1;
            }
            let right = self.unary()?;
            if kind == Kind::Range || right == Kind::Range {
                return Err("a range vector in arithmetic".into());
            }
            if right == Kind::Instant {
                kind = Kind::Instant;
            }
        }
        Ok(kind)
    }

    fn unary(&mut self) -> Result<Kind, String> {
        if matches!(self.peek(), Some(Token::Op(o)) if o == "-" || o == "+") {
            self.at += 1;
        }
        let kind = self.primary()?;
        if let Some(Token::Range(_)) = self.peek() {
            if kind != Kind::Instant {
                return Err("a range on something that is not a selector".into());
            }
            self.at += 1;
            return Ok(Kind::Range);
        }
        Ok(kind)
    }

    fn primary(&mut self) -> Result<Kind, String> {
        match self.next().ok_or("the expression ends early")? {
            Token::Number(_) => Ok(Kind::Scalar),
            Token::Str(_) => Ok(Kind::Text),
            Token::Op(o) if o == "(" => {
                let kind = self.expression()?;
                self.expect_op(")")?;
                Ok(kind)
            }
            Token::Op(o) if o == "{" => {
                let labels = self.matchers()?;
                Err(format!("a selector without a metric name ({labels:?})"))
            }
            Token::Ident(name) if AGGREGATIONS.contains(&name.as_str()) => self.aggregation(),
            Token::Ident(name) if matches!(self.peek(), Some(Token::Op(o)) if o == "(") => {
                self.call(&name)
            }
            Token::Ident(name) => {
                let labels = match self.peek() {
                    Some(Token::Op(o)) if o == "{" => {
                        self.at += 1;
                        self.matchers()?
                    }
                    _ => Vec::new(),
                };
                self.uses.push(SeriesUse {
                    metric: name,
                    labels,
                });
                Ok(Kind::Instant)
            }
            other => Err(format!("unexpected {other:?}")),
        }
    }

    /// After `{`: `label op "value"`, comma separated, to `}`.
    fn matchers(&mut self) -> Result<Vec<String>, String> {
        let mut labels = Vec::new();
        loop {
            match self.next() {
                Some(Token::Op(o)) if o == "}" => return Ok(labels),
                Some(Token::Ident(label)) => {
                    match self.next() {
                        Some(Token::Op(op)) if ["=", "!=", "=~", "!~"].contains(&op.as_str()) => {}
                        other => {
                            return Err(format!("expected a matcher operator, found {other:?}"))
                        }
                    }
                    match self.next() {
                        Some(Token::Str(_)) => labels.push(label),
                        other => return Err(format!("expected a quoted value, found {other:?}")),
                    }
                    match self.peek() {
                        Some(Token::Op(o)) if o == "," => self.at += 1,
                        Some(Token::Op(o)) if o == "}" => {}
                        other => return Err(format!("expected , or }}, found {other:?}")),
                    }
                }
                other => return Err(format!("expected a label, found {other:?}")),
            }
        }
    }

    /// `name(args)` for a known function.
    fn call(&mut self, name: &str) -> Result<Kind, String> {
        let (_, wants_range) = FUNCTIONS
            .iter()
            .find(|(f, _)| *f == name)
            .ok_or_else(|| format!("unknown function {name}"))?;
        self.expect_op("(")?;
        let mut kinds = Vec::new();
        if !matches!(self.peek(), Some(Token::Op(o)) if o == ")") {
            loop {
                kinds.push(self.expression()?);
                match self.next() {
                    Some(Token::Op(o)) if o == "," => continue,
                    Some(Token::Op(o)) if o == ")" => break,
                    other => return Err(format!("expected , or ) in {name}, found {other:?}")),
                }
            }
        } else {
            self.at += 1;
        }
        let vector = kinds.last().copied();
        match (wants_range, vector) {
            (true, Some(Kind::Range)) if kinds.len() == 1 => Ok(Kind::Instant),
            (true, _) => Err(format!("{name} takes one range vector")),
            (false, Some(Kind::Range)) => Err(format!("{name} does not take a range vector")),
            (false, _) if name == "histogram_quantile" && kinds.len() != 2 => {
                Err("histogram_quantile takes a quantile and a vector".into())
            }
            (false, _) => Ok(Kind::Instant),
        }
    }

    /// After the aggregation's name: an optional `by (...)`/`without (...)`, the
    /// arguments, and optionally the grouping after them.
    fn aggregation(&mut self) -> Result<Kind, String> {
        let mut grouping = self.grouping()?;
        let first_use = self.uses.len();
        self.expect_op("(")?;
        loop {
            if self.expression()? == Kind::Range {
                return Err("an aggregation of a range vector".into());
            }
            match self.next() {
                Some(Token::Op(o)) if o == "," => continue,
                Some(Token::Op(o)) if o == ")" => break,
                other => {
                    return Err(format!(
                        "expected , or ) in an aggregation, found {other:?}"
                    ))
                }
            }
        }
        grouping.extend(self.grouping()?);
        for series in &mut self.uses[first_use..] {
            series.labels.extend(grouping.iter().cloned());
        }
        Ok(Kind::Instant)
    }

    fn grouping(&mut self) -> Result<Vec<String>, String> {
        let Some(Token::Ident(word)) = self.peek() else {
            return Ok(Vec::new());
        };
        if word != "by" && word != "without" {
            return Ok(Vec::new());
        }
        self.at += 1;
        self.expect_op("(")?;
        let mut labels = Vec::new();
        loop {
            match self.next() {
                Some(Token::Ident(label)) => labels.push(label),
                Some(Token::Op(o)) if o == ")" => return Ok(labels),
                other => return Err(format!("expected a label in a grouping, found {other:?}")),
            }
            match self.peek() {
                Some(Token::Op(o)) if o == "," => self.at += 1,
                _ => {}
            }
        }
    }
}
