//! Label values taken from objects or answers.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// A label value that may hold any text (a condition message, a field path from a request):
/// written with `\`, `"` and line breaks escaped, as both exposition formats require.
/// prometheus-client (0.24) writes label values as given, and one unescaped quote makes
/// Prometheus refuse the whole scrape, every other series included.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Text(pub String);

impl EncodeLabelValue for Text {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Labels {
        message: Text,
    }

    #[test]
    fn quotes_backslashes_and_line_breaks_are_escaped() {
        let mut registry = Registry::default();
        let family = Family::<Labels, Gauge>::default();
        registry.register("state", "help", family.clone());
        let message = "shoots \"c-1\" already exists\nC:\\ end";
        family
            .get_or_create(&Labels {
                message: message.into(),
            })
            .set(1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"state{message="shoots \"c-1\" already exists\nC:\\ end"} 1"#),
            "{text}"
        );
    }
}
