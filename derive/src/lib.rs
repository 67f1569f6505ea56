//! `#[derive(Decode)]` for `kim_shared::json`: the webhook's JSON decoder with a small code
//! footprint (one non-generic function per type instead of serde's per-deserializer visitors).
//!
//! The derive reads the type's **serde** attributes, so the one type definition drives both
//! decoders and they cannot drift apart silently: the attributes it understands are `rename`,
//! `rename_all` (`camelCase`, `lowercase`), `default` and `flatten` (one per struct); the
//! serialization-only `skip_serializing_if` is ignored; any other serde attribute is a compile
//! error here, so whoever adds one decides how the fast decoder handles it.
//!
//! Structs with named fields and enums of unit variants are supported.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, LitStr, parse_macro_input};

/// Derives `kim_shared::json::Decode` (and, for structs, `kim_shared::json::DecodeFields`).
#[proc_macro_derive(Decode, attributes(serde))]
pub fn derive_decode(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct SerdeAttrs {
    rename: Option<String>,
    rename_all: Option<String>,
    default: bool,
    flatten: bool,
}

fn serde_attrs(attrs: &[syn::Attribute]) -> syn::Result<SerdeAttrs> {
    let mut out = SerdeAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                out.rename = Some(meta.value()?.parse::<LitStr>()?.value());
            } else if meta.path.is_ident("rename_all") {
                out.rename_all = Some(meta.value()?.parse::<LitStr>()?.value());
            } else if meta.path.is_ident("default") {
                if meta.input.peek(syn::Token![=]) {
                    return Err(meta.error("kim_derive::Decode: `default = \"path\"` is not supported; use `#[serde(default)]` or extend kim-derive"));
                }
                out.default = true;
            } else if meta.path.is_ident("flatten") {
                out.flatten = true;
            } else if meta.path.is_ident("skip_serializing_if") {
                let _: LitStr = meta.value()?.parse()?;
            } else {
                let name = meta
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                return Err(meta.error(format!(
                    "kim_derive::Decode does not handle `#[serde({name})]`: teach it (derive/src/lib.rs) so that the fast decoder keeps matching serde"
                )));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// serde's `RenameRule` for the rules the API types use.
fn rename(name: &str, rule: Option<&str>, is_field: bool, span: Span) -> syn::Result<String> {
    let name = name.strip_prefix("r#").unwrap_or(name);
    match rule {
        None => Ok(name.to_string()),
        Some("lowercase") => Ok(if is_field {
            name.to_string()
        } else {
            name.to_ascii_lowercase()
        }),
        Some("camelCase") if is_field => {
            let mut out = String::new();
            let mut upper = false;
            for c in name.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    out.push(c.to_ascii_uppercase());
                    upper = false;
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        }
        Some("camelCase") => {
            let mut c = name.chars();
            Ok(c.next()
                .map(|f| f.to_ascii_lowercase().to_string() + c.as_str())
                .unwrap_or_default())
        }
        Some(other) => Err(syn::Error::new(
            span,
            format!("kim_derive::Decode: rename_all = {other:?} is not supported"),
        )),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "kim_derive::Decode: generic types are not supported",
        ));
    }
    let container = serde_attrs(&input.attrs)?;
    if container.rename.is_some() || container.default || container.flatten {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "kim_derive::Decode: only `rename_all` is supported on the type",
        ));
    }
    let rule = container.rename_all.as_deref();
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => expand_struct(input, rule, named),
            Fields::Unit | Fields::Unnamed(_) => Err(syn::Error::new_spanned(
                &input.ident,
                "kim_derive::Decode: unit and tuple structs are not supported; implement Decode by hand",
            )),
        },
        Data::Enum(e) => expand_enum(input, rule, e),
        Data::Union(_) => Err(syn::Error::new_spanned(
            &input.ident,
            "kim_derive::Decode: unions are not supported",
        )),
    }
}

fn expand_struct(
    input: &DeriveInput,
    rule: Option<&str>,
    named: &syn::FieldsNamed,
) -> syn::Result<Tokens> {
    let ident = &input.ident;
    let builder = format_ident!("__KimDecode{}", ident);
    let mut slots = Vec::new();
    let mut arms = Vec::new();
    let mut build = Vec::new();
    let mut flatten: Option<(syn::Ident, syn::Type)> = None;
    for (i, f) in named.named.iter().enumerate() {
        let a = serde_attrs(&f.attrs)?;
        let Some(fident) = f.ident.as_ref() else {
            continue;
        };
        let ty = &f.ty;
        let slot = format_ident!("f{}", i);
        if a.flatten {
            if flatten.is_some() || a.rename.is_some() || a.default {
                return Err(syn::Error::new_spanned(
                    fident,
                    "kim_derive::Decode: one plain `#[serde(flatten)]` field per struct",
                ));
            }
            slots.push(quote! { #slot: <#ty as ::kim_shared::json::DecodeFields>::Builder });
            build.push(
                quote! { #fident: <#ty as ::kim_shared::json::DecodeFields>::finish(b.#slot)? },
            );
            flatten = Some((slot, ty.clone()));
            continue;
        }
        let json = match a.rename {
            Some(r) => r,
            None => rename(&fident.to_string(), rule, true, fident.span())?,
        };
        slots.push(quote! { #slot: ::core::option::Option<#ty> });
        arms.push(quote! {
            #json => ::kim_shared::json::once(&mut b.#slot, r).map(|()| true),
        });
        let missing = if a.default {
            quote! { ::core::default::Default::default() }
        } else {
            quote! { <#ty as ::kim_shared::json::Decode>::missing()? }
        };
        build.push(quote! {
            #fident: match b.#slot {
                ::core::option::Option::Some(v) => v,
                ::core::option::Option::None => #missing,
            }
        });
    }
    let fallthrough = match &flatten {
        Some((slot, ty)) => {
            quote! { _ => <#ty as ::kim_shared::json::DecodeFields>::field(&mut b.#slot, key, r) }
        }
        None => quote! { _ => ::core::result::Result::Ok(false) },
    };
    let construct = quote! { #ident { #(#build,)* } };
    Ok(quote! {
        const _: () = {
            #[doc(hidden)]
            #[derive(Default)]
            #[allow(non_camel_case_types, non_snake_case)]
            pub struct #builder { #(#slots,)* }

            #[automatically_derived]
            impl ::kim_shared::json::DecodeFields for #ident {
                type Builder = #builder;
                #[allow(unused_variables)]
                fn field(
                    b: &mut #builder,
                    key: &str,
                    r: &mut ::kim_shared::json::Reader<'_>,
                ) -> ::core::result::Result<bool, ::kim_shared::json::DecodeError> {
                    match key {
                        #(#arms)*
                        #fallthrough
                    }
                }
                #[allow(unused_variables)]
                fn finish(b: #builder) -> ::core::result::Result<Self, ::kim_shared::json::DecodeError> {
                    ::core::result::Result::Ok(#construct)
                }
            }

            #[automatically_derived]
            impl ::kim_shared::json::Decode for #ident {
                fn decode(
                    r: &mut ::kim_shared::json::Reader<'_>,
                ) -> ::core::result::Result<Self, ::kim_shared::json::DecodeError> {
                    ::kim_shared::json::decode_struct::<Self>(r)
                }
            }
        };
    })
}

fn expand_enum(input: &DeriveInput, rule: Option<&str>, e: &syn::DataEnum) -> syn::Result<Tokens> {
    let ident = &input.ident;
    let mut arms = Vec::new();
    for v in &e.variants {
        if !matches!(v.fields, Fields::Unit) {
            return Err(syn::Error::new_spanned(
                &v.ident,
                "kim_derive::Decode: only enums of unit variants are supported",
            ));
        }
        let a = serde_attrs(&v.attrs)?;
        if a.default || a.flatten {
            return Err(syn::Error::new_spanned(
                &v.ident,
                "kim_derive::Decode: only `rename` is supported on a variant",
            ));
        }
        let vident = &v.ident;
        let json = match a.rename {
            Some(r) => r,
            None => rename(&vident.to_string(), rule, false, vident.span())?,
        };
        arms.push(quote! { #json => ::core::result::Result::Ok(#ident::#vident), });
    }
    Ok(quote! {
        #[automatically_derived]
        impl ::kim_shared::json::Decode for #ident {
            fn decode(
                r: &mut ::kim_shared::json::Reader<'_>,
            ) -> ::core::result::Result<Self, ::kim_shared::json::DecodeError> {
                match &*r.string()? {
                    #(#arms)*
                    _ => ::core::result::Result::Err(::kim_shared::json::DecodeError),
                }
            }
        }
    })
}
