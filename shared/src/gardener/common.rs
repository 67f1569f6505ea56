//! Small value types shared by the Gardener objects and the Runtime: free-form provider
//! configuration and resource quantities, with the schemas upstream's CRDs use for them.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// A free-form embedded object (Go `runtime.RawExtension`), such as a `providerConfig`,
/// `infrastructureConfig` or `controlPlaneConfig`. Gardener itself does not type these: each
/// provider extension defines its own `apiVersion`/`kind`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(transparent)]
pub struct RawExtension(pub serde_json::Value);

impl RawExtension {
    /// The embedded object as JSON.
    pub fn as_value(&self) -> &serde_json::Value {
        &self.0
    }
}

impl From<serde_json::Value> for RawExtension {
    fn from(value: serde_json::Value) -> Self {
        Self(value)
    }
}

impl JsonSchema for RawExtension {
    fn schema_name() -> Cow<'static, str> {
        "RawExtension".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // Upstream's CRDs keep every field of an embedded object (no pruning).
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// A Kubernetes resource quantity (`"100m"`, `"1Gi"` or a plain number), kept as written: this
/// crate does no arithmetic on it. Kubernetes takes any whole number here (Go's
/// `resource.Quantity` is arbitrary precision), so a number is held as `i64`, not as the 32-bit
/// int of `IntOrString`: `10737418240` (10 GiB in bytes) is a valid volume size.
#[derive(Clone, Debug, PartialEq)]
pub enum Quantity {
    /// Written as a JSON number.
    Number(i64),
    /// Written as a JSON string.
    Text(String),
}

impl Quantity {
    /// The quantity as text (`10Gi`, `10737418240`), as Kubernetes prints it in messages.
    pub fn as_text(&self) -> Cow<'_, str> {
        match self {
            Self::Number(n) => Cow::Owned(n.to_string()),
            Self::Text(s) => Cow::Borrowed(s),
        }
    }
}

impl From<&str> for Quantity {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(n) => serializer.serialize_i64(*n),
            Self::Text(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;

        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity: a string such as \"10Gi\" or a whole number")
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Quantity, E> {
                Ok(Quantity::Number(n))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Quantity, E> {
                i64::try_from(n).map(Quantity::Number).map_err(|_| {
                    E::invalid_value(
                        de::Unexpected::Unsigned(n),
                        &"a number up to 9223372036854775807; write larger quantities with a suffix, such as \"10Ei\"",
                    )
                })
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Quantity, E> {
                Ok(Quantity::Text(s.to_owned()))
            }

            fn visit_string<E: de::Error>(self, s: String) -> Result<Quantity, E> {
                Ok(Quantity::Text(s))
            }
        }

        deserializer.deserialize_any(QuantityVisitor)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // Same shape as controller-gen emits for resource.Quantity.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        })
    }
}

/// Schema of an int-or-string field (`maxSurge`, `maxUnavailable`) as controller-gen emits it.
pub(crate) fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
    })
}

/// Schema of a `[]byte` field: base64 text (`format: byte`).
pub(crate) fn byte_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "byte",
    })
}

#[cfg(test)]
mod tests {
    use super::Quantity;

    #[test]
    fn a_quantity_is_kept_as_written_and_any_whole_number_is_one() {
        for (text, q) in [
            (r#""10Gi""#, Quantity::from("10Gi")),
            ("1024", Quantity::Number(1024)),
            ("10737418240", Quantity::Number(10_737_418_240)),
            ("-1", Quantity::Number(-1)),
            ("9223372036854775807", Quantity::Number(i64::MAX)),
        ] {
            let read: Quantity = serde_json::from_str(text).expect(text);
            assert_eq!(read, q, "{text}");
            assert_eq!(serde_json::to_string(&read).expect("writes"), text);
        }
        assert_eq!(Quantity::Number(10_737_418_240).as_text(), "10737418240");
        assert_eq!(Quantity::from("1Gi").as_text(), "1Gi");
    }

    #[test]
    fn what_is_no_quantity_is_refused_with_what_would_do() {
        for (text, words) in [
            (
                "9223372036854775808",
                "write larger quantities with a suffix",
            ),
            ("1.5", r#"a string such as "10Gi" or a whole number"#),
            ("true", r#"a string such as "10Gi" or a whole number"#),
            ("{}", r#"a string such as "10Gi" or a whole number"#),
        ] {
            let err = serde_json::from_str::<Quantity>(text).expect_err(text);
            assert!(err.to_string().contains(words), "{text}: {err}");
        }
    }
}
