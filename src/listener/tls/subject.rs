//! A client certificate's subject as an RFC 4514 string, for the access log: the relative
//! names last to first, `type=value` joined by `,` (`+` inside a multi-valued one), the
//! types RFC 4514 names by their short names and any other by its dotted OID.
//!
//! The subject was signed by the client CA the operator configured, yet its values are
//! whatever that CA put there: special characters are escaped as the RFC says, control
//! characters as `\XX`, and the whole is cut at [`MAX_SUBJECT_BYTES`].

use tokio_rustls::rustls::pki_types::CertificateDer;

/// Longest subject written: it is on every access-log line of the connection.
pub const MAX_SUBJECT_BYTES: usize = 512;

/// The subject of `certificate` (DER), if it parses.
pub fn rfc4514_subject(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let mut out = String::new();
    let rdns: Vec<_> = parsed.subject().iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attribute.attr_type().to_id_string();
            out.push_str(short_name(&oid).unwrap_or(&oid));
            out.push('=');
            match attribute.as_str() {
                Ok(value) => escape_into(&mut out, value),
                // Not a string type: the value's bytes in hex, as the RFC writes them.
                Err(_) => {
                    out.push('#');
                    for byte in attribute.attr_value().data.iter() {
                        out.push_str(&format!("{byte:02x}"));
                    }
                }
            }
        }
    }
    if out.len() > MAX_SUBJECT_BYTES {
        let mut end = MAX_SUBJECT_BYTES;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    Some(out)
}

/// RFC 4514 section 3's short names.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// Appends `value` escaped as RFC 4514 section 2.4 asks.
fn escape_into(out: &mut String, value: &str) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
            out.push(c);
        } else if c.is_control() {
            let mut bytes = [0u8; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("\\{byte:02x}"));
            }
        } else {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_rfc_4514_says() {
        let mut out = String::new();
        escape_into(&mut out, " a,b+c\"d\\e;f<g>h ");
        assert_eq!(out, "\\ a\\,b\\+c\\\"d\\\\e\\;f\\<g\\>h\\ ");
        let mut out = String::new();
        escape_into(&mut out, "#x\ny");
        assert_eq!(out, "\\#x\\0ay", "a leading # and a control character");
    }
}
