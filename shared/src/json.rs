//! A JSON decoder with a small code footprint, for the webhook's hot path.
//!
//! Why: serde's derived decoders are fast in a hot loop, but each type gets its own visitor
//! per deserializer (up to 28 KB of machine code per struct, about 1 MB for a Runtime). A
//! webhook thread wakes up for each request with cold caches, and fetching that code and its
//! data cost more than the decoding itself (docs/benchmarks.md). Here every type decodes
//! through one non-generic [`Reader`]; `#[derive(Decode)]` (crate `kim-derive`) writes, per
//! struct, one string match that calls the field types' `decode`.
//!
//! **serde stays the authority.** The derive reads the types' own serde attributes, and
//! [`from_str`] falls back to `serde_json` whenever the fast path meets anything it does not
//! handle exactly like serde (an error, a duplicate field, a float where an integer is
//! expected, an unknown enum value, nesting deeper than 100, ...). So the result of [`from_str`]
//! is always serde's, and every error message is serde's; the fast path only has to be
//! right when it succeeds, which `shared/tests/json_decode.rs` checks against serde on the
//! upstream examples, generated Runtimes and a corpus of edge cases.
//!
//! **One deliberate difference: `metadata.managedFields` is checked, not kept.** The fast
//! path accepts and refuses it exactly as serde does, but answers `None` for it. Nothing on
//! the admission path reads it, and the apiserver puts it into every review (about a third
//! of a Runtime CREATE review, two of them in an UPDATE's `object` and `oldObject`): typing
//! its `fieldsV1` trees cost more than the rest of the review (docs/benchmarks.md). Clients
//! of the webhook's decoders drop it on the serde path too (`Admitted::from_json`), as
//! controllers drop it from their caches.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;

pub use kim_derive::Decode;

/// The fast path could not decode the input exactly as serde would; [`from_str`] asks serde.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError;

type Result<T> = std::result::Result<T, DecodeError>;

/// A type the fast path can decode.
pub trait Decode: Sized {
    /// Decodes one JSON value.
    fn decode(r: &mut Reader<'_>) -> Result<Self>;

    /// The value of a missing field without `#[serde(default)]`: serde's rule is `None` for an
    /// `Option` and an error for anything else.
    fn missing() -> Result<Self> {
        Err(DecodeError)
    }
}

/// A struct decoded field by field (what `#[serde(flatten)]` needs).
pub trait DecodeFields: Sized {
    /// The fields seen so far.
    type Builder: Default;
    /// Decodes the value of `key` into the builder; `Ok(false)` when the key is not a field.
    fn field(b: &mut Self::Builder, key: &str, r: &mut Reader<'_>) -> Result<bool>;
    /// The struct, once the object ended.
    fn finish(b: Self::Builder) -> Result<Self>;
}

/// Decodes a JSON object into `T`, skipping unknown keys (as serde does without
/// `deny_unknown_fields`).
pub fn decode_struct<T: DecodeFields>(r: &mut Reader<'_>) -> Result<T> {
    let mut b = T::Builder::default();
    r.object(&mut |r, key| {
        if T::field(&mut b, key, r)? {
            Ok(())
        } else {
            r.skip()
        }
    })?;
    T::finish(b)
}

/// Puts a decoded value into an empty `slot`; a second value for the same slot (a duplicate
/// key) is left to serde.
pub fn set_once<T>(slot: &mut Option<T>, value: Result<T>) -> Result<()> {
    if slot.is_some() {
        return Err(DecodeError);
    }
    *slot = Some(value?);
    Ok(())
}

/// [`set_once`] of the value at the cursor.
pub fn once<T: Decode>(slot: &mut Option<T>, r: &mut Reader<'_>) -> Result<()> {
    set_once(slot, T::decode(r))
}

/// Decodes `text` as `T`: the fast path when it can, otherwise serde (whose result and error
/// messages this always equals, but for `metadata.managedFields`: `None` when the fast path
/// answered, module documentation).
pub fn from_str<T: Decode + DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    match fast_from_str(text) {
        Ok(v) => Ok(v),
        Err(DecodeError) => serde_json::from_str(text),
    }
}

/// The fast path alone (tests and benchmarks use it to show the fast path was taken).
pub fn fast_from_str<T: Decode>(text: &str) -> Result<T> {
    decode_all(text, T::decode)
}

/// `text` as one value decoded by `decode`, with nothing but whitespace after it.
pub fn decode_all<T>(text: &str, decode: impl FnOnce(&mut Reader<'_>) -> Result<T>) -> Result<T> {
    let mut r = Reader::new(text);
    let v = decode(&mut r)?;
    r.end()?;
    Ok(v)
}

/// Appends `s` to `out` as a JSON string, escaped byte for byte as `serde_json` escapes it
/// (`"`, `\\`, and control characters; `\b \f \n \r \t` short, the others as `\u00xx`).
/// For the webhook's responses and audit records, which it writes without serde's per-type
/// code for the same reason it reads without it (module documentation).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        // plain_run stops exactly at the bytes that need escaping.
        let i = plain_run(bytes, start);
        out.extend_from_slice(&bytes[start..i]);
        let Some(&b) = bytes.get(i) else { break };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
        start = i + 1;
    }
    out.push(b'"');
}

/// Appends `b` to `out` as a JSON boolean.
pub fn write_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// Appends `items` to `out` as a JSON array of strings, as `serde_json` writes it.
pub fn write_str_array(out: &mut Vec<u8>, items: &[String]) {
    out.push(b'[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, s);
    }
    out.push(b']');
}

/// Appends `entries` to `out` as a JSON object with string keys, each value written by
/// `value`, as `serde_json` writes a map.
pub fn write_object<'a, V: 'a>(
    out: &mut Vec<u8>,
    entries: impl IntoIterator<Item = (&'a String, V)>,
    value: impl Fn(&mut Vec<u8>, V),
) {
    out.push(b'{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        value(out, v);
    }
    out.push(b'}');
}

/// A cursor over JSON text. Its methods are not generic, so all types share their code.
pub struct Reader<'a> {
    text: &'a str,
    pos: usize,
    /// Open objects and arrays: deeper than [`MAX_DEPTH`] is left to serde, which stops at 128
    /// with an error (the fast path must not recurse without bound on hostile input).
    depth: u32,
}

/// Nesting the fast path handles; serde's own limit is 128.
const MAX_DEPTH: u32 = 100;

impl<'a> Reader<'a> {
    /// A reader at the start of `text`.
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            pos: 0,
            depth: 0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn ws(&mut self) {
        let b = self.bytes();
        while let Some(c) = b.get(self.pos) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The next non-whitespace byte, not consumed (`{`, `[`, `"`, ... tell the value's kind).
    pub fn peek(&mut self) -> Result<u8> {
        self.ws();
        self.bytes().get(self.pos).copied().ok_or(DecodeError)
    }

    fn eat(&mut self, c: u8) -> Result<()> {
        if self.peek()? == c {
            self.pos += 1;
            Ok(())
        } else {
            Err(DecodeError)
        }
    }

    fn literal(&mut self, word: &str) -> Result<()> {
        self.ws();
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(DecodeError)
        }
    }

    /// Only whitespace is left.
    pub fn end(&mut self) -> Result<()> {
        self.ws();
        if self.pos == self.text.len() {
            Ok(())
        } else {
            Err(DecodeError)
        }
    }

    /// Consumes a `null` if one is next.
    pub fn null(&mut self) -> Result<bool> {
        if self.peek()? == b'n' {
            self.literal("null")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// A JSON boolean.
    pub fn boolean(&mut self) -> Result<bool> {
        match self.peek()? {
            b't' => self.literal("true").map(|()| true),
            b'f' => self.literal("false").map(|()| false),
            _ => Err(DecodeError),
        }
    }

    /// The end of the JSON number at the cursor (strict grammar), and whether it is an
    /// integer (no fraction, no exponent).
    fn number_end(&self) -> Result<(usize, bool)> {
        let b = self.bytes();
        let digits = |mut i: usize| {
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            (i, i - start)
        };
        let mut i = self.pos;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let (after, n) = digits(i);
        if n == 0 || (n > 1 && b[i] == b'0') {
            return Err(DecodeError);
        }
        i = after;
        let mut integer = true;
        if b.get(i) == Some(&b'.') {
            let (after, n) = digits(i + 1);
            if n == 0 {
                return Err(DecodeError);
            }
            i = after;
            integer = false;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let (after, n) = digits(i);
            if n == 0 {
                return Err(DecodeError);
            }
            i = after;
            integer = false;
        }
        Ok((i, integer))
    }

    /// A JSON integer (no fraction or exponent: serde refuses those for integer fields too,
    /// with its own message).
    pub fn integer(&mut self) -> Result<i64> {
        self.ws();
        let (end, integer) = self.number_end()?;
        if !integer {
            return Err(DecodeError);
        }
        let v = self.text[self.pos..end].parse().map_err(|_| DecodeError)?;
        self.pos = end;
        Ok(v)
    }

    /// A JSON string, borrowed from the text unless it has escapes.
    pub fn string(&mut self) -> Result<Cow<'a, str>> {
        self.eat(b'"')?;
        let b = self.bytes();
        let start = self.pos;
        let i = plain_run(b, start);
        match b.get(i) {
            Some(b'"') => {
                self.pos = i + 1;
                Ok(Cow::Borrowed(&self.text[start..i]))
            }
            Some(b'\\') => self.escaped(start, i).map(Cow::Owned),
            // A control character or the end of the text: serde's error.
            _ => Err(DecodeError),
        }
    }

    /// The rest of a string that has escapes, from `start`; `i` is the first backslash.
    fn escaped(&mut self, start: usize, mut i: usize) -> Result<String> {
        let b = self.bytes();
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.text[start..i]);
        loop {
            let c = *b.get(i).ok_or(DecodeError)?;
            match c {
                b'"' => {
                    self.pos = i + 1;
                    return Ok(out);
                }
                b'\\' => {
                    let e = *b.get(i + 1).ok_or(DecodeError)?;
                    i += 2;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4(i)?;
                            i += 4;
                            let ch = if (0xD800..0xDC00).contains(&hi) {
                                // A surrogate pair; anything else (serde refuses lone
                                // surrogates with its own message) goes to serde.
                                if b.get(i) != Some(&b'\\') || b.get(i + 1) != Some(&b'u') {
                                    return Err(DecodeError);
                                }
                                let lo = self.hex4(i + 2)?;
                                i += 6;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(DecodeError);
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(ch).ok_or(DecodeError)?);
                        }
                        _ => return Err(DecodeError),
                    }
                }
                0..=0x1f => return Err(DecodeError),
                _ => {
                    // Copy the run up to the next quote or backslash in one go.
                    let end = plain_run(b, i);
                    out.push_str(&self.text[i..end]);
                    i = end;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Result<u32> {
        let s = self.text.get(at..at + 4).ok_or(DecodeError)?;
        if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(DecodeError);
        }
        u32::from_str_radix(s, 16).map_err(|_| DecodeError)
    }

    /// A JSON object: `f` is called with each key, positioned at its value, and must consume
    /// the value.
    pub fn object(&mut self, f: &mut dyn FnMut(&mut Reader<'a>, &str) -> Result<()>) -> Result<()> {
        self.eat(b'{')?;
        self.enter()?;
        let r = self.object_entries(f);
        self.depth -= 1;
        r
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(DecodeError);
        }
        Ok(())
    }

    fn object_entries(
        &mut self,
        f: &mut dyn FnMut(&mut Reader<'a>, &str) -> Result<()>,
    ) -> Result<()> {
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            // Unescaped, as serde matches field names and map keys: `"\u0073pec"` is `spec`.
            // Real reviews have such keys: `metadata.managedFields` names set members and
            // list entries by JSON values (`v:"<finalizer>"`, `k:{"name":...}`).
            let key = self.string()?;
            self.eat(b':')?;
            f(self, &key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(DecodeError),
            }
        }
    }

    /// A JSON array: `f` is called at each element and must consume it.
    pub fn array(&mut self, f: &mut dyn FnMut(&mut Reader<'a>) -> Result<()>) -> Result<()> {
        self.eat(b'[')?;
        self.enter()?;
        let r = self.array_elements(f);
        self.depth -= 1;
        r
    }

    fn array_elements(&mut self, f: &mut dyn FnMut(&mut Reader<'a>) -> Result<()>) -> Result<()> {
        if self.peek()? == b']' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            f(self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(DecodeError),
            }
        }
    }

    /// Skips one value of any kind.
    pub fn skip(&mut self) -> Result<()> {
        match self.peek()? {
            b'{' => self.object(&mut |r, _| r.skip()),
            b'[' => self.array(&mut |r| r.skip()),
            b'"' => self.string().map(drop),
            b't' | b'f' => self.boolean().map(drop),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => {
                self.pos = self.number_end()?.0;
                Ok(())
            }
            _ => Err(DecodeError),
        }
    }

    /// Skips one value of text that is known to be valid JSON (it was decoded before): only
    /// strings and brackets are looked at, so it is several times faster than [`Self::skip`],
    /// but on invalid JSON it may stop anywhere (never panics, may return an error).
    pub fn skip_valid(&mut self) -> Result<()> {
        let b = self.bytes();
        let mut depth = 0usize;
        let mut i = self.pos;
        loop {
            let Some(&c) = b.get(i) else {
                // The end of the text ends a scalar at the top level.
                if depth == 0 && i > self.pos {
                    break;
                }
                return Err(DecodeError);
            };
            match c {
                b'"' => {
                    // To the closing quote, stepping over escapes.
                    i += 1;
                    loop {
                        i = plain_run(b, i);
                        match b.get(i) {
                            Some(b'"') => break,
                            Some(b'\\') => i += 2,
                            Some(_) => i += 1,
                            None => return Err(DecodeError),
                        }
                    }
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' => {
                    if depth == 0 {
                        // The end of the enclosing container: a scalar ended before it.
                        break;
                    }
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
                b',' if depth == 0 => break,
                _ => i += 1,
            }
        }
        // A scalar at depth 0 ends at the `,`, `}` or `]` after it; trailing whitespace of a
        // number or literal is harmless to the callers, which look at the next token first.
        self.pos = i;
        Ok(())
    }

    /// Decodes the next value with `f`, and returns its text too (exactly the value, without
    /// the whitespace around it).
    pub fn with_text<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<(T, &'a str)> {
        self.ws();
        let start = self.pos;
        let v = f(self)?;
        Ok((v, &self.text[start..self.pos]))
    }

    /// The text of the next value, consumed.
    pub fn raw(&mut self) -> Result<&'a str> {
        self.with_text(Self::skip).map(|((), text)| text)
    }

    /// The next value decoded by serde: for types that are rare in a Runtime or whose rules
    /// are serde's own (floats, timestamps, free-form objects).
    pub fn serde<T: DeserializeOwned>(&mut self) -> Result<T> {
        serde_json::from_str(self.raw()?).map_err(|_| DecodeError)
    }
}

/// The index of the first byte at or after `i` that ends a run of plain string characters (a
/// quote, a backslash or a control character), or `b.len()`. Eight bytes at a time: most
/// strings of a Runtime are names and CIDRs of a few dozen bytes.
fn plain_run(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        // A byte is flagged when it is zero (after the xor) or below 0x20; the lowest flag is
        // exact, so is the first stop.
        let stops = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let stops = stops & HIGH;
        if stops != 0 {
            return i + (stops.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        i += 1;
    }
    i
}

impl Decode for String {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        r.string().map(Cow::into_owned)
    }
}

impl Decode for bool {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        r.boolean()
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Decode for $t {
            fn decode(r: &mut Reader<'_>) -> Result<Self> {
                <$t>::try_from(r.integer()?).map_err(|_| DecodeError)
            }
        }
    )*};
}
integers!(i32, i64, u32);

macro_rules! by_serde {
    ($($t:ty),*) => {$(
        impl Decode for $t {
            fn decode(r: &mut Reader<'_>) -> Result<Self> {
                r.serde()
            }
        }
    )*};
}
by_serde!(f64, serde_json::Value, Condition, ByteString, Taint);

impl Decode for Time {
    /// As k8s-openapi's decoder: a string, parsed by jiff's default timestamp parser (what
    /// `jiff::Timestamp`'s serde implementation calls). Every review has two or more.
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        r.string()?
            .parse::<k8s_openapi::jiff::Timestamp>()
            .map(Time)
            .map_err(|_| DecodeError)
    }
}

impl<T: Decode> Decode for Option<T> {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        if r.null()? {
            Ok(None)
        } else {
            T::decode(r).map(Some)
        }
    }

    fn missing() -> Result<Self> {
        Ok(None)
    }
}

impl<T: Decode> Decode for Box<T> {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        T::decode(r).map(Box::new)
    }
}

impl<T: Decode> Decode for Vec<T> {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let mut out = Vec::new();
        r.array(&mut |r| {
            out.push(T::decode(r)?);
            Ok(())
        })?;
        Ok(out)
    }
}

impl<T: Decode> Decode for BTreeMap<String, T> {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let mut out = BTreeMap::new();
        r.object(&mut |r, key| {
            // serde's map keeps the last of duplicate keys, as insert does.
            out.insert(key.to_owned(), T::decode(r)?);
            Ok(())
        })?;
        Ok(out)
    }
}

impl Decode for IntOrString {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        if r.peek()? == b'"' {
            String::decode(r).map(IntOrString::String)
        } else {
            i32::decode(r).map(IntOrString::Int)
        }
    }
}

/// Reads `metadata.managedFields` as far as k8s-openapi's decoder would accept or refuse it,
/// without keeping it: the fast path answers `None` for it (module documentation). Accepted:
/// `null`, or an array of objects whose string fields are strings or `null`, whose `time` is
/// a timestamp or `null`, and whose `fieldsV1` and unknown keys are any JSON. Anything else
/// is left to serde.
fn check_managed_fields(r: &mut Reader<'_>) -> Result<()> {
    if r.null()? {
        return Ok(());
    }
    r.array(&mut |r| {
        r.object(&mut |r, key| match key {
            "apiVersion" | "fieldsType" | "manager" | "operation" | "subresource" => {
                if !r.null()? {
                    r.string()?;
                }
                Ok(())
            }
            "time" => Option::<Time>::decode(r).map(drop),
            // `fieldsV1` is any JSON value, as unknown keys are.
            _ => r.skip(),
        })
    })
}

impl Decode for ObjectMeta {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let mut m = ObjectMeta::default();
        // As k8s-openapi's decoder: unknown keys skipped, the last of duplicate keys kept.
        r.object(&mut |r, key| {
            match key {
                "annotations" => m.annotations = Decode::decode(r)?,
                "creationTimestamp" => m.creation_timestamp = Decode::decode(r)?,
                "deletionGracePeriodSeconds" => {
                    m.deletion_grace_period_seconds = Decode::decode(r)?
                }
                "deletionTimestamp" => m.deletion_timestamp = Decode::decode(r)?,
                "finalizers" => m.finalizers = Decode::decode(r)?,
                "generateName" => m.generate_name = Decode::decode(r)?,
                "generation" => m.generation = Decode::decode(r)?,
                "labels" => m.labels = Decode::decode(r)?,
                // Checked, not kept: `m.managed_fields` stays `None`.
                "managedFields" => check_managed_fields(r)?,
                "name" => m.name = Decode::decode(r)?,
                "namespace" => m.namespace = Decode::decode(r)?,
                "ownerReferences" => m.owner_references = r.serde()?,
                "resourceVersion" => m.resource_version = Decode::decode(r)?,
                "selfLink" => m.self_link = Decode::decode(r)?,
                "uid" => m.uid = Decode::decode(r)?,
                _ => r.skip()?,
            }
            Ok(())
        })?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn write_str_escapes_exactly_as_serde_json() {
        let mut cases: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b{c}"))
            .collect();
        // Long enough for the eight-byte scan, the byte at each position of a chunk.
        for c in (0u32..0x80).filter_map(char::from_u32) {
            for at in [0, 3, 7, 8, 12, 15, 16, 19] {
                let mut s: Vec<char> = "0123456789abcdefghij".chars().collect();
                s[at] = c;
                cases.push(s.iter().chain(s.iter()).collect());
            }
        }
        cases.extend(
            [
                "",
                "plain",
                "\"",
                "\\",
                "é ü 日本 🦀",
                "\u{7f}\u{80}",
                "a\"b\\c\nd\u{1}e\u{1f}",
            ]
            .map(String::from),
        );
        for s in cases {
            let mut out = Vec::new();
            super::write_str(&mut out, &s);
            let want = serde_json::to_string(&s).expect("json");
            assert_eq!(String::from_utf8(out).expect("utf-8"), want, "{s:?}");
        }
    }

    use super::*;

    #[test]
    fn strings_with_and_without_escapes_decode_as_serde_does() {
        for text in [
            r#""plain""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""\u00e9\u4e2d \ud83d\ude00 tail""#,
            r#""ünïcödé written as is""#,
            r#""""#,
        ] {
            let fast: String = fast_from_str(text).expect(text);
            let serde: String = serde_json::from_str(text).expect(text);
            assert_eq!(fast, serde, "{text}");
        }
    }

    #[test]
    fn what_the_fast_path_does_not_do_exactly_like_serde_it_leaves_to_serde() {
        // Lone surrogate, float for an integer, out of range, trailing garbage, bad literal.
        assert!(fast_from_str::<String>(r#""\ud800""#).is_err());
        assert!(fast_from_str::<i32>("1.0").is_err());
        assert!(fast_from_str::<i32>("1e3").is_err());
        assert!(fast_from_str::<i32>("3000000000").is_err());
        assert!(fast_from_str::<bool>("true x").is_err());
        assert!(fast_from_str::<bool>("tru").is_err());
        assert!(fast_from_str::<Option<String>>("nul").is_err());
        // ... and from_str then answers exactly as serde.
        assert_eq!(
            from_str::<i32>("1.0").map_err(|e| e.to_string()),
            serde_json::from_str::<i32>("1.0").map_err(|e| e.to_string())
        );
    }

    #[test]
    fn plain_run_stops_where_a_byte_by_byte_scan_stops() {
        let naive = |b: &[u8], i: usize| {
            b[i..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .map_or(b.len(), |p| i + p)
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..40 {
            for _ in 0..200 {
                let text: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Mostly plain bytes, UTF-8 high bytes, sometimes a stop.
                        match x % 40 {
                            0 => b'"',
                            1 => b'\\',
                            2 => (x >> 8) as u8 % 0x20,
                            3..=8 => 0x80 | (x >> 8) as u8,
                            _ => b'a' + (x >> 8) as u8 % 26,
                        }
                    })
                    .collect();
                for start in 0..=text.len() {
                    assert_eq!(
                        plain_run(&text, start),
                        naive(&text, start),
                        "{text:?} from {start}"
                    );
                }
            }
        }
    }

    #[test]
    fn skip_valid_ends_where_skip_ends() {
        for text in [
            r#"{"a":[1,{"b":"}]\"\\"},null],"c":{}}"#,
            r#"[ "x" , 1.5e3 , true , [ ] ]"#,
            r#""str\"ing""#,
            r#"-12.5e-3"#,
            r#"true"#,
            r#"null"#,
            r#"{}"#,
        ] {
            for suffix in ["", ",1", "]", "}", " ,2"] {
                let doc = format!("{text}{suffix}");
                let mut a = Reader::new(&doc);
                let mut b = Reader::new(&doc);
                a.skip().expect(&doc);
                b.skip_valid().expect(&doc);
                b.ws();
                a.ws();
                assert_eq!(a.pos, b.pos, "{doc}");
            }
        }
    }

    #[test]
    fn integers_options_vectors_and_maps() {
        assert_eq!(fast_from_str::<i64>(" -42 "), Ok(-42));
        assert_eq!(fast_from_str::<Option<i32>>("null"), Ok(None));
        assert_eq!(fast_from_str::<Vec<u32>>("[1, 2 ,3]"), Ok(vec![1, 2, 3]));
        let m: BTreeMap<String, bool> =
            fast_from_str(r#"{"a":true,"b":false,"a":false}"#).expect("map");
        assert_eq!(
            m,
            serde_json::from_str(r#"{"a":true,"b":false,"a":false}"#).expect("serde")
        );
        assert_eq!(
            fast_from_str::<IntOrString>(r#""25%""#),
            Ok(IntOrString::String("25%".into()))
        );
        assert_eq!(fast_from_str::<IntOrString>("3"), Ok(IntOrString::Int(3)));
    }
}
