//! The JSON output schema, and a check of a document against it.
//!
//! [`JSON_SCHEMA`] is a JSON Schema (draft 2020-12) of the report that
//! `fence audit --json` prints and [`Report::write_json`] writes
//! ([`Report`] is the same schema as a serde type). It is shipped in the crate
//! as `schema/report-v1.schema.json`.
//!
//! [`validate`] checks a document against it with the keywords the schema
//! uses (`type`, `required`, `properties`, `items`, `enum`, `const`,
//! `minimum`, `pattern`, local `$ref`), and also reports any property the
//! schema does not describe: the schema documents every field of its
//! version. A consumer reading newer output should ignore unknown fields
//! instead (fields are only ever added within a version).
//!
//! [`Report`]: crate::Report
//! [`Report::write_json`]: crate::Report::write_json

use regex::Regex;
use serde_json::Value;

/// The JSON Schema of the report, version [`crate::JSON_VERSION`].
pub const JSON_SCHEMA: &str = include_str!("../schema/report-v1.schema.json");

/// Checks `document` against [`JSON_SCHEMA`]; on failure, every violation as
/// `path: what` (e.g. `/findings/3/line: below the minimum 1`).
pub fn validate(document: &Value) -> Result<(), Vec<String>> {
    let schema: Value =
        serde_json::from_str(JSON_SCHEMA).expect("the shipped schema is JSON (tested)");
    let mut errors = Vec::new();
    check(&schema, &schema, document, "", &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("only local $refs in the schema");
            resolve(root, root.pointer(pointer).expect("a $ref that resolves"))
        }
        None => schema,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(root: &Value, schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let here = || if path.is_empty() { "/" } else { path };
    // `$ref` may sit beside annotations (`description`): check both.
    if schema.get("$ref").is_some() {
        check(root, resolve(root, schema), value, path, errors);
    }
    if let Some(t) = schema.get("type") {
        let allowed: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let actual = type_of(value);
        if !allowed.contains(&actual) {
            errors.push(format!(
                "{}: a {actual}, expected {}",
                here(),
                allowed.join(" or ")
            ));
            return;
        }
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        errors.push(format!("{}: {value}, expected {c}", here()));
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        errors.push(format!("{}: {value} is not one of {options:?}", here()));
    }
    if let (Some(min), Some(n)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && n < min
    {
        errors.push(format!("{}: below the minimum {min}", here()));
    }
    if let (Some(p), Some(s)) = (
        schema.get("pattern").and_then(Value::as_str),
        value.as_str(),
    ) && !Regex::new(p)
        .expect("the schema's patterns compile")
        .is_match(s)
    {
        errors.push(format!("{}: {s:?} does not match {p}", here()));
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            check(root, items, item, &format!("{path}/{i}"), errors);
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    errors.push(format!("{}: missing `{name}`", here()));
                }
            }
        }
        if let Some(properties) = properties {
            for (name, v) in object {
                match properties.get(name) {
                    Some(s) => check(root, s, v, &format!("{path}/{name}"), errors),
                    None => errors.push(format!("{}: `{name}` is not in the schema", here())),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_shipped_schema_is_json_and_names_its_version() {
        let schema: Value = serde_json::from_str(JSON_SCHEMA).unwrap();
        assert_eq!(
            schema["properties"]["version"]["const"],
            json!(crate::JSON_VERSION)
        );
    }

    #[test]
    fn violations_are_named_by_path() {
        let doc = json!({
            "version": 2, "root": ".", "extra": 1,
            "findings": [{"file": "a.py", "line": 0, "column": 1, "category": "lock",
                          "kind": "Redis_SET", "language": "cobol", "snippet": "",
                          "fenced": "yes", "message": ""}],
            "summary": {}
        });
        let errors = validate(&doc).unwrap_err();
        for expected in [
            "/version: 2, expected 1",
            "/: `extra` is not in the schema",
            "/findings/0/line: below the minimum 1",
            "/findings/0/kind: \"Redis_SET\" does not match",
            "/findings/0/language: \"cobol\" is not one of",
            "/findings/0/fenced: a string, expected boolean or null",
            "/summary: missing `files_scanned`",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(expected)),
                "{expected} not in {errors:#?}"
            );
        }
    }
}
