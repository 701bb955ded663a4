//! Pipeline metadata schemas (addendum §5.2): which JSON Schemas are accepted, how document
//! metadata is validated against them, and which schema changes are compatible.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// Field types a property may declare (alone or paired with `"null"`).
const FIELD_TYPES: [&str; 5] = ["string", "integer", "number", "boolean", "object"];

/// Whether a name is an identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The schema used when a pipeline declares none.
pub fn default_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// The annotation that says whether Trove keeps an index on declared fields
/// (`store::indexes::sync_declared_field_indexes`): `true` or `false` on a top-level property
/// for that field, at the top of the schema for every property that does not say.
pub const INDEX_ANNOTATION: &str = "x-trove-index";

/// Whether the declared field of `property` in `schema` is indexed: its own
/// [`INDEX_ANNOTATION`], else the schema's, else yes.
pub fn indexed(schema: &Value, property: &Value) -> bool {
    property
        .get(INDEX_ANNOTATION)
        .or_else(|| schema.get(INDEX_ANNOTATION))
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

/// The fields a group's rows are written in the order of (`store::ingestion::store_group`): the
/// declared top-level string fields that are indexed, by name. Equality filters on such fields
/// (a category, a tenant) pick moderate shares of a pipeline, which exact searches read through
/// the field's index; rows of one value written together fill fewer pages.
pub fn write_order_fields(schema: &Value) -> Vec<String> {
    let mut fields: Vec<String> = properties(schema)
        .into_iter()
        .filter(|(_, property)| {
            property_type(property) == Some("string") && indexed(schema, property)
        })
        .map(|(field, _)| field)
        .collect();
    fields.sort();
    fields
}

/// The declared type of a top-level property: its type name without `"null"`.
pub fn property_type(property: &Value) -> Option<&str> {
    match property.get("type")? {
        Value::String(t) => Some(t.as_str()),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    }
}

/// The declared top-level properties.
pub fn properties(schema: &Value) -> Map<String, Value> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn declared_type_ok(ty: &Value) -> bool {
    match ty {
        Value::String(t) => FIELD_TYPES.contains(&t.as_str()),
        Value::Array(pair) => {
            pair.len() == 2
                && pair.iter().any(|t| t == "null")
                && pair
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .all(|t| FIELD_TYPES.contains(&t))
                && pair.iter().all(Value::is_string)
        }
        _ => false,
    }
}

/// Whether `array` appears as a type, or an array keyword is used, anywhere in the schema.
fn mentions_arrays(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, v)| {
            matches!(key.as_str(), "items" | "prefixItems" | "contains")
                || (key == "type"
                    && (v == "array"
                        || v.as_array()
                            .is_some_and(|ts| ts.iter().any(|t| t == "array"))))
                || mentions_arrays(v)
        }),
        Value::Array(items) => items.iter().any(mentions_arrays),
        _ => false,
    }
}

/// Checks a schema against §5.2; any violation is `Schema error`.
pub fn check_schema(schema: &Value) -> Result<(), ApiError> {
    let Some(object) = schema.as_object() else {
        return Err(ApiError::Schema);
    };
    if let Some(ty) = object.get("type")
        && ty != "object"
    {
        return Err(ApiError::Schema);
    }
    if let Some(properties) = object.get("properties") {
        let Some(properties) = properties.as_object() else {
            return Err(ApiError::Schema);
        };
        for (name, property) in properties {
            if !is_identifier(name) {
                return Err(ApiError::Schema);
            }
            match property.get("type") {
                Some(ty) if declared_type_ok(ty) => {}
                _ => return Err(ApiError::Schema),
            }
            if property
                .get(INDEX_ANNOTATION)
                .is_some_and(|a| !a.is_boolean())
            {
                return Err(ApiError::Schema);
            }
        }
    }
    if object
        .get(INDEX_ANNOTATION)
        .is_some_and(|a| !a.is_boolean())
    {
        return Err(ApiError::Schema);
    }
    if mentions_arrays(schema) {
        return Err(ApiError::Schema);
    }
    jsonschema::draft202012::new(schema)
        .map(|_| ())
        .map_err(|_| ApiError::Schema)
}

/// Checks that `new` may replace `current`: every current property still declared with the
/// same type, and `required` a subset of the current one.
pub fn check_compatible(current: &Value, new: &Value) -> Result<(), ApiError> {
    let new_properties = properties(new);
    for (name, property) in properties(current) {
        let Some(new_property) = new_properties.get(&name) else {
            return Err(ApiError::Schema);
        };
        if new_property.get("type") != property.get("type") {
            return Err(ApiError::Schema);
        }
    }
    let required = |schema: &Value| -> Vec<String> {
        schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let current_required = required(current);
    if required(new).iter().any(|r| !current_required.contains(r)) {
        return Err(ApiError::Schema);
    }
    Ok(())
}

/// Validates document metadata; `Invalid metadata` with top-level field → reason.
pub fn validate_metadata(schema: &Value, metadata: &Value) -> Result<(), ApiError> {
    let validator = jsonschema::draft202012::new(schema).map_err(|_| ApiError::Schema)?;
    let mut details = Map::new();
    for error in validator.iter_errors(metadata) {
        let path = error.instance_path().as_str().to_owned();
        let field = match error.kind() {
            jsonschema::error::ValidationErrorKind::Required { property } if path.is_empty() => {
                property.as_str().map(str::to_owned).unwrap_or_default()
            }
            _ => path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
        };
        details
            .entry(field)
            .or_insert_with(|| Value::String(error.to_string()));
    }
    if details.is_empty() {
        Ok(())
    } else {
        Err(ApiError::InvalidMetadata(details))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepted_and_refused_schemas() {
        assert!(check_schema(&default_schema()).is_ok());
        assert!(check_schema(&json!({"properties": {"a": {"type": ["string", "null"]}, "b": {"type": "object", "properties": {"x": {"type": "integer"}}}}, "required": ["a"]})).is_ok());
        for bad in [
            json!([]),
            json!({"type": "array"}),
            json!({"properties": {"a": {"type": "array"}}}),
            json!({"properties": {"a": {"type": "object", "properties": {"b": {"type": "array"}}}}}),
            json!({"properties": {"a": {"type": "string", "items": {}}}}),
            json!({"properties": {"1a": {"type": "string"}}}),
            json!({"properties": {"a": {}}}),
            json!({"properties": {"a": {"type": ["string", "integer"]}}}),
            json!({"properties": {"a": {"type": "date"}}}),
            json!({"properties": {"a": {"type": "string", "minLength": "x"}}}),
        ] {
            assert!(check_schema(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rows_are_written_in_the_order_of_the_indexed_string_fields() {
        let schema = json!({"properties": {
            "tenant": {"type": "string"},
            "category": {"type": ["string", "null"]},
            "note": {"type": "string", INDEX_ANNOTATION: false},
            "year": {"type": "integer"},
            "published": {"type": "boolean"},
            "source": {"type": "object", "properties": {"name": {"type": "string"}}},
        }});
        assert_eq!(write_order_fields(&schema), ["category", "tenant"]);
        let off = json!({INDEX_ANNOTATION: false, "properties": {"a": {"type": "string"}}});
        assert!(write_order_fields(&off).is_empty());
        assert!(write_order_fields(&default_schema()).is_empty());
    }

    #[test]
    fn declared_fields_are_indexed_unless_the_schema_says_otherwise() {
        let property = |annotation: Option<bool>| match annotation {
            Some(a) => json!({"type": "string", INDEX_ANNOTATION: a}),
            None => json!({"type": "string"}),
        };
        let plain = json!({"type": "object"});
        let off = json!({"type": "object", INDEX_ANNOTATION: false});
        let on = json!({"type": "object", INDEX_ANNOTATION: true});
        assert!(indexed(&plain, &property(None)));
        assert!(!indexed(&plain, &property(Some(false))));
        assert!(!indexed(&off, &property(None)));
        assert!(indexed(&off, &property(Some(true))));
        assert!(!indexed(&on, &property(Some(false))));
        assert!(indexed(&on, &property(None)));
        let annotated = json!({INDEX_ANNOTATION: false, "properties": {
            "a": {"type": "string", INDEX_ANNOTATION: true},
            "b": {"type": "integer"},
        }});
        assert!(check_schema(&annotated).is_ok());
        for bad in [
            json!({INDEX_ANNOTATION: "no", "properties": {}}),
            json!({"properties": {"a": {"type": "string", INDEX_ANNOTATION: 0}}}),
            json!({"properties": {"a": {"type": "string", INDEX_ANNOTATION: null}}}),
        ] {
            assert!(check_schema(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_details_name_top_level_fields() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}, "o": {"type": "object", "properties": {"x": {"type": "string"}}}}, "required": ["r"]});
        let Err(ApiError::InvalidMetadata(details)) =
            validate_metadata(&schema, &json!({"a": "x", "o": {"x": 1}}))
        else {
            panic!("expected invalid metadata")
        };
        assert!(
            details.contains_key("a") && details.contains_key("o") && details.contains_key("r"),
            "{details:?}"
        );
        assert!(validate_metadata(&schema, &json!({"r": 1})).is_ok());
    }

    #[test]
    fn compatibility() {
        let current = json!({"properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert!(
            check_compatible(
                &current,
                &json!({"properties": {"a": {"type": "string"}, "b": {"type": "integer"}}})
            )
            .is_ok()
        );
        assert!(
            check_compatible(&current, &json!({"properties": {"a": {"type": "integer"}}})).is_err()
        );
        assert!(check_compatible(&current, &json!({"properties": {}})).is_err());
        assert!(check_compatible(&current, &json!({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]})).is_err());
    }
}
