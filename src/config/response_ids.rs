//! `response_ids`: the secrets stored-response IDs are signed with (see `response_id.rs`).

use super::raw::RawResponseIds;
use super::upstream::credential;
use super::values::Errors;
use super::ResponseIdSecrets;

/// Shortest secret accepted: 32 bytes, the HMAC-SHA256 block's half.
const MIN_SECRET_BYTES: usize = 32;

/// The section checked: the current secret is required and long enough; the previous one
/// (during a rotation) too, when named. Without the section, IDs are signed with a secret
/// of the process alone: a warning when some model serves the Responses API.
pub(super) fn response_ids(
    errors: &mut Errors,
    raw: Option<&RawResponseIds>,
    serves_responses: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<ResponseIdSecrets> {
    let Some(raw) = raw else {
        if serves_responses {
            errors.warn(
                "response_ids",
                "is not set: stored-response IDs are signed with a secret of this process, so \
                 other replicas and this one after a restart answer them 404; set \
                 response_ids.secret_env on every replica",
            );
        }
        return None;
    };
    let secret = |errors: &mut Errors, field: &str, name: &str| {
        let value = credential(errors, field, name, env)?;
        if value.expose().len() < MIN_SECRET_BYTES {
            errors.push(
                field,
                format!(
                    "environment variable {name} holds fewer than {MIN_SECRET_BYTES} bytes; \
                     use a random secret such as the output of `openssl rand -base64 32`"
                ),
            );
            return None;
        }
        Some(value)
    };
    let current = match raw.secret_env.as_deref() {
        Some(name) => secret(errors, "response_ids.secret_env", name),
        None => {
            errors.push("response_ids.secret_env", "is required");
            None
        }
    };
    let previous = raw
        .previous_secret_env
        .as_deref()
        .and_then(|name| secret(errors, "response_ids.previous_secret_env", name));
    Some(ResponseIdSecrets {
        current: current?,
        previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        yaml: &str,
        serves: bool,
        vars: &[(&str, &str)],
    ) -> (Option<ResponseIdSecrets>, Errors) {
        let raw: Option<RawResponseIds> = serde_yaml::from_str(yaml).unwrap();
        let mut errors = Errors::new("gateway.yaml");
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        let secrets = response_ids(&mut errors, raw.as_ref(), serves, &env);
        (secrets, errors)
    }

    const LONG: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn secrets_come_from_the_environment_and_must_be_long() {
        let (secrets, errors) = read(
            "{secret_env: NEW, previous_secret_env: OLD}",
            true,
            &[("NEW", LONG), ("OLD", "fedcba9876543210fedcba9876543210")],
        );
        assert!(errors.list.is_empty(), "{:?}", errors.list);
        let secrets = secrets.unwrap();
        assert_eq!(secrets.current.expose(), LONG);
        assert!(secrets.previous.is_some());

        let (_, errors) = read("{secret_env: NEW}", true, &[("NEW", "short")]);
        assert_eq!(errors.list[0].path, "gateway.yaml: response_ids.secret_env");
        assert!(errors.list[0].message.contains("fewer than 32 bytes"));
        let (_, errors) = read("{previous_secret_env: OLD}", true, &[("OLD", LONG)]);
        assert_eq!(errors.list[0].message, "is required");
        let (_, errors) = read("{secret_env: UNSET}", true, &[]);
        assert!(errors.list[0].message.contains("UNSET is not set"));
    }

    #[test]
    fn no_section_warns_only_when_a_model_serves_responses() {
        let (secrets, errors) = read("null", true, &[]);
        assert!(secrets.is_none() && errors.list.is_empty());
        assert_eq!(errors.warnings.len(), 1);
        assert_eq!(errors.warnings[0].path, "gateway.yaml: response_ids");
        let (_, errors) = read("null", false, &[]);
        assert!(errors.warnings.is_empty());
    }
}
