//! Reading an AdmissionReview with serde, without an intermediate JSON tree, in one pass over
//! the body: the objects are typed as they are read, with `metadata.managedFields` and the
//! top-level `status` skipped ([`IgnoredAny`]) instead of typed. Both are still read as JSON, so
//! a review with malformed JSON there is refused.
//!
//! Why skip `managedFields`: the apiserver puts it into every object of a review (about a third
//! of a Runtime CREATE review, and twice in an UPDATE), no rule reads it, and typing its
//! `fieldsV1` trees costs more than the rest of the object; its content is the apiserver's own.
//!
//! Why skip `status`: no rule reads it, and it is not the client's to set. The webhooks are not
//! called for the status subresource, which the controller writes, and on the main resource the
//! apiserver puts the stored status into the object of an UPDATE whatever the client sent. A
//! status our types cannot read (a condition time with ten fractional digits, a field a newer
//! controller wrote) would otherwise refuse every change and the deletion of its object, and
//! with them the repair.
//!
//! When that one pass fails, the review is read again in two: the envelope with the objects as
//! their JSON text ([`RawValue`], which only checks it), then each object from its text. A
//! stored object (`oldObject`) that does not read as its type is then kept as its metadata and
//! the reason ([`UnreadableOld`]): deletion is judged on metadata, and an update is how such an
//! object is repaired. An object as sent that does not read fails with the error of its own
//! text. The text of the object as sent, which only a defaults patch needs, is read the same
//! way when asked for ([`ObjectText`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;
use serde_json::value::RawValue;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::request::{Request, UnreadableOld};
use kim_shared::validation::Violation;

/// An AdmissionReview as read: `apiVersion` and `kind` (empty when absent; checked by the
/// caller) and the request with objects of type `O`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review<'a, O> {
    /// Should be `admission.k8s.io/v1`.
    #[serde(default, borrow)]
    pub api_version: Cow<'a, str>,
    /// Should be `AdmissionReview`.
    #[serde(default, borrow)]
    pub kind: Cow<'a, str>,
    /// The request; `None` when the review has none.
    pub request: Option<Request<O>>,
}

/// A review whose objects are typed as `T`, and the way to the text of `request.object` as
/// sent.
pub struct Typed<'a, T> {
    /// The review.
    pub review: Review<'a, T>,
    /// `request.object` as sent (the defaults patch is computed against it).
    pub object_text: ObjectText<'a>,
}

/// The text of a review's `request.object` exactly as sent, read from the body when asked for:
/// a second pass over the body, which only a review that gets a defaults patch pays.
#[derive(Clone, Copy)]
pub struct ObjectText<'a>(&'a [u8]);

impl<'a> ObjectText<'a> {
    /// The text; `None` when the review has no object (or does not read).
    pub fn get(&self) -> Option<&'a str> {
        raw_review(self.0).ok()?.request?.object.map(RawValue::get)
    }
}

/// The review with its objects typed as `T` (`metadata.managedFields` and `status` left out).
pub fn review<T: DeserializeOwned>(body: &[u8]) -> Result<Typed<'_, T>, serde_json::Error> {
    // Only a body that is UTF-8 throughout: serde_json does not check the UTF-8 of the strings
    // it skips (`managedFields`), where the two passes refuse it.
    let once = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str::<Review<'_, Judged<T>>>(text).ok());
    let review = match once {
        Some(review) => unjudged(review),
        None => review_in_two_passes(body)?,
    };
    Ok(Typed {
        review,
        object_text: ObjectText(body),
    })
}

/// The review read from its envelope with the objects as text, then each object from its
/// text: what [`review`] falls back to, for its stored object that does not read and the
/// precise error of an object as sent that does not.
fn review_in_two_passes<T: DeserializeOwned>(
    body: &[u8],
) -> Result<Review<'_, T>, serde_json::Error> {
    let raw = raw_review(body)?;
    let Some(request) = raw.request else {
        return Ok(Review {
            api_version: raw.api_version,
            kind: raw.kind,
            request: None,
        });
    };
    let (old_object, old_object_unreadable) = match request.old_object {
        None => (None, None),
        Some(old) => match object::<T>(old.get()) {
            Ok(old) => (Some(old), None),
            Err(e) => (None, Some(unreadable_old::<T>(old.get(), e)?)),
        },
    };
    let object = request.object.map(|o| object::<T>(o.get())).transpose()?;
    let mut request = request.with_objects(object, old_object);
    request.old_object_unreadable = old_object_unreadable;
    Ok(Review {
        api_version: raw.api_version,
        kind: raw.kind,
        request: Some(request),
    })
}

/// The review with its objects as JSON text. Fails only when the body is not JSON or the
/// envelope does not have the AdmissionReview's shape.
pub fn raw_review(body: &[u8]) -> Result<Review<'_, &RawValue>, serde_json::Error> {
    // UTF-8 is checked once for the whole body instead of once per string (serde_json's slice
    // reader does the latter); a body that is not UTF-8 goes to the slice reader for its
    // error message.
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

/// An object read as [`object`] reads it, inside the review.
struct Judged<T>(T);

/// The review read in one pass, its objects as `T`s.
fn unjudged<T>(review: Review<'_, Judged<T>>) -> Review<'_, T> {
    Review {
        api_version: review.api_version,
        kind: review.kind,
        request: review.request.map(|mut r| {
            let (object, old_object) = (r.object.take(), r.old_object.take());
            r.with_objects(object.map(|Judged(o)| o), old_object.map(|Judged(o)| o))
        }),
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Judged<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(WithoutUnjudged::root(d)).map(Judged)
    }
}

/// A stored object that is no `T`: its metadata and the field at fault, or `error` when not
/// even its metadata reads.
fn unreadable_old<T: DeserializeOwned>(
    text: &str,
    error: serde_json::Error,
) -> Result<UnreadableOld, serde_json::Error> {
    #[derive(Deserialize)]
    struct MetadataOnly {
        #[serde(default)]
        metadata: ObjectMeta,
    }
    let Ok(MetadataOnly { metadata }) = object::<MetadataOnly>(text) else {
        return Err(error);
    };
    let (field, reason) = object_mismatch::<T>(text).unwrap_or_else(|| (".".into(), error));
    Ok(UnreadableOld {
        metadata,
        field,
        reason: reason.to_string(),
    })
}

/// An object typed from its JSON text, without `metadata.managedFields` and `status`.
pub fn object<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(WithoutUnjudged::root(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Why an object's JSON text is not a `T`: the path of the value at fault (`spec.shoot.name`,
/// `.` for the object itself) and serde's reason; `None` when it is one. Decodes as [`object`]
/// does (one pass over the text, `metadata.managedFields` and `status` skipped), only tracking the path, so
/// diagnosing a malformed review costs no JSON tree.
pub fn object_mismatch<T: DeserializeOwned>(text: &str) -> Option<(String, serde_json::Error)> {
    let mut de = serde_json::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, T>(WithoutUnjudged::root(&mut de)) {
        Ok(_) => de.end().err().map(|e| (".".to_string(), e)),
        Err(e) => Some((e.path().to_string(), e.into_inner())),
    }
}

/// A type mismatch (`path` and serde's `reason`) as a violation in the API's words: a missing
/// field at its own path, "an integer" for `i32`, and no position in a JSON text the client
/// never wrote. `label` says which object of the review it is in.
pub fn mismatch_violation(path: &str, reason: &str, label: &str, kind: &str) -> Violation {
    let reason = without_position(reason);
    let at = |name: &str| match path {
        "" | "." => name.to_owned(),
        _ => format!("{path}.{name}"),
    };
    if let Some(name) = reason
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return Violation {
            field: at(name),
            message: format!("Required value: {label} does not match the {kind} schema"),
        };
    }
    Violation {
        field: path.to_owned(),
        message: format!(
            "{label} does not match the {kind} schema: {}",
            in_api_words(reason)
        ),
    }
}

/// serde_json's reason without its ` at line L column C` suffix.
fn without_position(reason: &str) -> &str {
    match reason.rsplit_once(" at line ") {
        Some((head, tail))
            if tail
                .split_once(" column ")
                .is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) =>
        {
            head
        }
        _ => reason,
    }
}

/// What serde expected, in the words of the OpenAPI schema instead of Rust's type names.
fn in_api_words(reason: &str) -> String {
    let Some((head, expected)) = reason.rsplit_once("expected ") else {
        return reason.to_owned();
    };
    let words = match expected {
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer",
        "f32" | "f64" => "a number",
        "a sequence" => "a list",
        "a map" => "an object",
        e if e.starts_with("struct ") => "an object",
        e => e,
    };
    format!("{head}expected {words}")
}

/// An object's JSON text as a JSON value, without `metadata.managedFields` and `status`.
pub fn object_value(text: &str) -> Result<Value, serde_json::Error> {
    object::<Value>(text)
}

/// Where in the object a value is: at the top, or the value of the top-level `metadata`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
}

/// A deserializer that hands every value on to `inner`, except that the key `managedFields` of
/// the top-level `metadata` object and the top-level key `status` are read as [`IgnoredAny`]
/// and not shown to the visitor.
struct WithoutUnjudged<D> {
    inner: D,
    level: Level,
}

impl<D> WithoutUnjudged<D> {
    fn root(inner: D) -> Self {
        Self {
            inner,
            level: Level::Root,
        }
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for WithoutUnjudged<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(Wrap {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(Wrap {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_newtype_struct(
            name,
            Wrap {
                inner: visitor,
                level: self.level,
            },
        )
    }

    // Objects are self-describing in JSON: the other requests for a value are answered as
    // `deserialize_any` answers them, which is what serde_json does for structs and maps too.
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// The visitor of [`WithoutUnjudged`]: passes everything to `inner`, wrapping a map so
/// that its keys are seen first, and the deserializer of an optional value so that its map is.
struct Wrap<V> {
    inner: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.inner.visit_str(v)
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(v)
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.inner.visit_string(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(WithoutUnjudged {
            inner: d,
            level: self.level,
        })
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(WithoutUnjudged {
            inner: d,
            level: self.level,
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Map {
            inner: map,
            level: self.level,
            metadata_next: false,
        })
    }
}

/// The entries of an object: at the top, `status` is skipped and the value of `metadata` is
/// read one level down; in `metadata`, `managedFields` is skipped.
struct Map<A> {
    inner: A,
    level: Level,
    /// The key just handed out was the top-level `metadata`.
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            let skipped = match self.level {
                Level::Root => key == "status",
                Level::Metadata => key == "managedFields",
            };
            if skipped {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.metadata_next = self.level == Level::Root && key == "metadata";
            return match key {
                Cow::Borrowed(k) => seed
                    .deserialize(de::value::BorrowedStrDeserializer::new(k))
                    .map(Some),
                Cow::Owned(k) => seed.deserialize(k.into_deserializer()).map(Some),
            };
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(Metadata(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The value of the top-level `metadata`, read without its `managedFields`.
struct Metadata<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Metadata<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(WithoutUnjudged {
            inner: d,
            level: Level::Metadata,
        })
    }
}

/// An object key, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn managed_fields_are_read_as_json_but_not_typed_nor_kept() {
        let text = r#"{"metadata":{"name":"cm","managedFields":[{"manager":"keb","fieldsV1":{"f:data":{}}}],"labels":{"a":"b"}},"data":{"k":"v"}}"#;
        let cm: ConfigMap = object(text).expect("decodes");
        assert_eq!(cm.metadata.managed_fields, None);
        assert_eq!(cm.metadata.name.as_deref(), Some("cm"));
        assert_eq!(
            cm.metadata.labels.and_then(|l| l.get("a").cloned()),
            Some("b".into())
        );
        assert_eq!(cm.data.and_then(|d| d.get("k").cloned()), Some("v".into()));
        // Their content is not checked against their type...
        for managed in [
            "5",
            "null",
            r#"{"x":[1,{"y":null}]}"#,
            r#"[{"time":"yesterday"}]"#,
        ] {
            let text = format!(r#"{{"metadata":{{"name":"cm","managedFields":{managed}}}}}"#);
            let cm: ConfigMap = object(&text).unwrap_or_else(|e| panic!("{managed}: {e}"));
            assert_eq!(cm.metadata.managed_fields, None);
        }
        // ... but it must be JSON.
        for managed in ["[1,]", "tru", r#""\x""#, "[[[]"] {
            let text = format!(r#"{{"metadata":{{"name":"cm","managedFields":{managed}}}}}"#);
            assert!(object::<ConfigMap>(&text).is_err(), "{managed}");
        }
        // A key with escapes is the same key.
        let escaped = r#"{"metadata":{"\u006danagedFields":5,"name":"cm"}}"#;
        let cm: ConfigMap = object(escaped).expect("decodes");
        assert_eq!(cm.metadata.name.as_deref(), Some("cm"));
        // Only metadata's: a key of that name elsewhere is read as usual.
        let elsewhere = r#"{"metadata":{},"data":{"managedFields":"x"}}"#;
        let cm: ConfigMap = object(elsewhere).expect("decodes");
        assert_eq!(
            cm.data.and_then(|d| d.get("managedFields").cloned()),
            Some("x".into())
        );
        // The JSON value for the patch leaves them out too, and keeps everything else.
        let v = object_value(text).expect("JSON");
        assert_eq!(
            v,
            serde_json::json!({"metadata":{"name":"cm","labels":{"a":"b"}},"data":{"k":"v"}})
        );
    }

    #[test]
    fn what_serde_refuses_is_refused() {
        let refused = [
            // An integer spelled -0 (serde reads it as a float).
            r#"{"metadata":{"generation":-0}}"#,
            r#"{"metadata":{"generation":1.0}}"#,
            r#"{"metadata":{"generation":"1"}}"#,
            r#"{"metadata":{"name":null,"labels":5}}"#,
            r#"{"metadata":{}} trailing"#,
            r#"{"metadata":{}"#,
            "null",
            "[]",
        ];
        for text in refused {
            assert!(object::<ConfigMap>(text).is_err(), "{text}");
        }
        let cm: ConfigMap = object(r#"{"metadata":{"generation":0}}"#).expect("decodes");
        assert_eq!(cm.metadata.generation, Some(0));
        // In a map, and in k8s-openapi's types (metadata), the last of duplicate keys wins
        // (the derived types of the request and of our API refuse them: `crate::kinds`).
        let cm: ConfigMap =
            object(r#"{"metadata":{"name":"a","name":"b"},"data":{"k":"1","k":"2"}}"#)
                .expect("decodes");
        assert_eq!(cm.data.and_then(|d| d.get("k").cloned()), Some("2".into()));
        assert_eq!(cm.metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn a_mismatch_reads_in_the_words_of_the_api() {
        let (path, e) =
            object_mismatch::<ConfigMap>(r#"{"metadata":{"name":"cm"},"data":{"a":5}}"#)
                .expect("mismatch");
        let v = mismatch_violation(&path, &e.to_string(), "object", "ConfigMap");
        assert_eq!(
            v.to_string(),
            "data.a: object does not match the ConfigMap schema: invalid type: integer `5`, expected a string"
        );
        let v = mismatch_violation(
            "spec.shoot",
            "missing field `purpose` at line 1 column 912",
            "object",
            "Runtime",
        );
        assert_eq!(
            v.to_string(),
            "spec.shoot.purpose: Required value: object does not match the Runtime schema"
        );
        for (serde, api) in [
            (
                "invalid type: string \"3\", expected i32 at line 1 column 1187",
                "invalid type: string \"3\", expected an integer",
            ),
            (
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a non-negative integer",
            ),
            (
                "invalid type: string \"x\", expected struct RuntimeNetworking",
                "invalid type: string \"x\", expected an object",
            ),
            (
                "unknown variant `x`, expected one of `a`, `b`",
                "unknown variant `x`, expected one of `a`, `b`",
            ),
            ("value at line 3", "value at line 3"),
        ] {
            let v = mismatch_violation("spec.x", serde, "object", "Runtime");
            assert_eq!(
                v.message,
                format!("object does not match the Runtime schema: {api}")
            );
        }
    }

    #[test]
    fn a_mismatch_is_located_in_the_text() {
        let at =
            |text: &str| object_mismatch::<ConfigMap>(text).map(|(path, e)| (path, e.to_string()));
        assert_eq!(at(r#"{"metadata":{"name":"cm"},"data":{"k":"v"}}"#), None);
        let (path, why) = at(r#"{"metadata":{"name":"cm"},"data":{"a":5}}"#).expect("mismatch");
        assert_eq!(path, "data.a");
        assert!(why.contains("invalid type: integer `5`"), "{why}");
        let (path, why) = at(r#"{"metadata":{"generation":-0}}"#).expect("mismatch");
        assert_eq!(path, "metadata.generation");
        assert!(why.contains("floating point `-0.0`"), "{why}");
        // managedFields are not what an object is refused for, as when decoding.
        assert_eq!(at(r#"{"metadata":{"managedFields":5}}"#), None);
        let (path, _) = at("[]").expect("mismatch");
        assert_eq!(path, ".");
    }

    /// The one pass and the two it falls back to read every review alike: the same request,
    /// or errors alike.
    #[test]
    fn one_pass_reads_as_two_passes_do() {
        let body = |object: &str, old: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"operation":"UPDATE","userInfo":{{"username":"a"}},"object":{object},"oldObject":{old}}}}}"#
            )
        };
        let good = r#"{"metadata":{"name":"cm","managedFields":[{"x":1}]},"status":{"y":[]},"data":{"k":"v"}}"#;
        let bad = r#"{"metadata":{"name":"cm"},"data":{"k":5}}"#;
        let bodies = [
            body(good, good),
            body(good, "null"),
            body("null", good),
            body(good, bad),
            body(bad, good),
            body(bad, bad),
            body(good, r#"{"metadata":5}"#),
            body(good, "[1,]"),
            body(good, good).replacen("\"uid\":\"u\"", "\"uid\":7", 1),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_string(),
            "{".to_string(),
        ];
        let mut bodies = bodies.map(String::into_bytes).to_vec();
        // Not UTF-8 where it is skipped (managedFields): refused, as the two passes refuse it.
        let mut not_utf8 = body(good, good).into_bytes();
        let at = not_utf8
            .windows(3)
            .position(|w| w == b"\"x\"")
            .expect("managedFields' key");
        not_utf8[at + 1] = 0xa6;
        bodies.push(not_utf8);
        let once_more = body(good, good);
        // A duplicate object (refused), an escaped key, the stored object first, trailing data.
        bodies.extend(
            [
                once_more.replacen("\"oldObject\":", "\"object\":", 1),
                once_more.replacen("\"object\":", "\"\\u006fbject\":", 1),
                body(good, bad).replacen(
                    &format!("\"object\":{good},\"oldObject\":{bad}"),
                    &format!("\"oldObject\":{bad},\"object\":{good}"),
                    1,
                ),
                format!("{once_more} x"),
            ]
            .map(String::into_bytes),
        );
        assert_ne!(
            bodies[14],
            body(good, bad).into_bytes(),
            "the stored object first"
        );
        let mut two_passes_only = 0;
        for body in &bodies {
            let shown = String::from_utf8_lossy(body);
            let once = std::str::from_utf8(body)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    serde_json::from_str::<Review<'_, Judged<ConfigMap>>>(text)
                        .map_err(|e| e.to_string())
                })
                .map(|r| format!("{:?}", unjudged(r).request));
            let twice = review_in_two_passes::<ConfigMap>(body).map(|r| format!("{:?}", r.request));
            let read = review::<ConfigMap>(body).map(|r| format!("{:?}", r.review.request));
            match (&once, &twice) {
                (Ok(once), Ok(twice)) => assert_eq!(once, twice, "{shown}"),
                (Ok(once), Err(e)) => panic!("{shown}: one pass reads {once}, two fail: {e}"),
                (Err(_), _) => two_passes_only += 1,
            }
            assert_eq!(
                read.as_ref().map_err(ToString::to_string),
                twice.as_ref().map_err(ToString::to_string),
                "{shown}"
            );
        }
        // The unreadable stored objects and the refusals took the second way.
        assert_eq!(two_passes_only, 11);
        assert!(review::<ConfigMap>(&bodies[11]).is_err(), "not UTF-8");
        let stored_unreadable = review::<ConfigMap>(&bodies[3])
            .expect("read")
            .review
            .request
            .expect("request");
        assert_eq!(
            stored_unreadable.old_object_unreadable.map(|u| u.field),
            Some("data.k".to_string())
        );
    }

    #[test]
    fn the_object_text_is_kept_exactly_as_sent() {
        let object = r#"{ "metadata" : {"name":"cm"} , "data":{"k":"v"} }"#;
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"operation":"CREATE","userInfo":{{}},"object":{object},"oldObject":null}}}}"#
        );
        let typed = review::<ConfigMap>(body.as_bytes()).expect("decodes");
        assert_eq!(typed.object_text.get(), Some(object));
        let req = typed.review.request.expect("request");
        assert!(req.old_object.is_none());
        assert_eq!(
            req.object.and_then(|o| o.metadata.name),
            Some("cm".to_string())
        );
    }
}
