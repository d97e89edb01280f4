//! The generator of `src/venue/cme_mdp3/templates.rs`: CME MDP 3.0 SBE
//! decoders written from CME's published schemas in
//! `src/venue/cme_mdp3/schema/` (venues.md `cme-mdp3`: "the decoder
//! follows CME's published schema, every version from 5 to 13").
//!
//! `cargo test --test cme_sbe_codegen` regenerates the module and fails if
//! the checked-in file differs; after changing a schema or this generator,
//! `TICKGATE_REGENERATE=1 cargo test --test cme_sbe_codegen` rewrites it.
//! The generated code is checked in (not written by a build script) so
//! that a schema change shows up as a reviewable diff of the decoders, and
//! so that building tickgate needs neither this generator nor an XML
//! parser (roxmltree is a dev-dependency only).
//!
//! Each template is generated from the latest schema that defines it.
//! CME's schemas only ever append: a field or group added in version `v`
//! carries `sinceVersion="v"`. The generator checks that against every
//! other schema file defining the template (same fields, offsets and sizes;
//! whatever an older file lacks has a `sinceVersion` above it), so one
//! decoder per template reads every version from 5 to 13: a field whose
//! `sinceVersion` is above the message's version reads as null, and a
//! group whose `sinceVersion` is above it is not on the wire. Version 7 has
//! no published file here; its layouts are the `sinceVersion` marks of
//! version 8's file.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The schema files, by version (`Cme.Futures.Mdp3.Sbe.v1.<v>.xml`).
const VERSIONS: &[u16] = &[5, 6, 8, 9, 10, 11, 12, 13];

/// The templates venues.md `cme-mdp3` reads: ChannelReset, AdminHeartbeat,
/// the instrument definitions, SecurityStatus, the incremental entries
/// (Book, DailyStatistics, LimitsBanding, SessionStatistics, Volume,
/// TradeSummary) and SnapshotFullRefresh. Any other template is unknown
/// to the decoder (skipped by MsgSize and counted).
const TEMPLATES: &[u16] = &[
    4, 12, 27, 29, 30, 32, 33, 34, 35, 37, 38, 41, 42, 46, 48, 49, 50, 51, 52, 54, 55, 56, 57, 58,
    63, 64, 65, 66, 67, 69,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    Char,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
}

impl Prim {
    fn parse(s: &str) -> Prim {
        match s {
            "char" => Prim::Char,
            "int8" => Prim::I8,
            "uint8" => Prim::U8,
            "int16" => Prim::I16,
            "uint16" => Prim::U16,
            "int32" => Prim::I32,
            "uint32" => Prim::U32,
            "int64" => Prim::I64,
            "uint64" => Prim::U64,
            other => panic!("primitive type {other}"),
        }
    }

    fn size(self) -> usize {
        match self {
            Prim::Char | Prim::I8 | Prim::U8 => 1,
            Prim::I16 | Prim::U16 => 2,
            Prim::I32 | Prim::U32 => 4,
            Prim::I64 | Prim::U64 => 8,
        }
    }

    /// The Rust type a value reads as (a char is its byte).
    fn rust(self) -> &'static str {
        match self {
            Prim::Char | Prim::U8 => "u8",
            Prim::I8 => "i8",
            Prim::I16 => "i16",
            Prim::U16 => "u16",
            Prim::I32 => "i32",
            Prim::U32 => "u32",
            Prim::I64 => "i64",
            Prim::U64 => "u64",
        }
    }

    /// A schema value as a Rust literal of this type.
    fn literal(self, v: &str) -> String {
        let v = v.trim();
        match self {
            Prim::Char => {
                assert!(v.len() == 1 && v.is_ascii(), "char value {v:?}");
                let c = v.as_bytes()[0];
                if c.is_ascii_alphanumeric() {
                    format!("b'{}'", c as char)
                } else {
                    format!("0x{c:02x}")
                }
            }
            _ => {
                v.parse::<i128>()
                    .unwrap_or_else(|_| panic!("integer value {v:?}"));
                format!("{v}_{}", self.rust())
            }
        }
    }

    /// A null value as a Rust expression (`i64::MAX` rather than its digits).
    fn null_literal(self, v: &str) -> String {
        let n: i128 = match v.trim().parse() {
            Ok(n) => n,
            Err(_) => return self.literal(v),
        };
        let (min, max): (i128, i128) = match self {
            Prim::Char | Prim::U8 => (0, u8::MAX.into()),
            Prim::I8 => (i8::MIN.into(), i8::MAX.into()),
            Prim::U16 => (0, u16::MAX.into()),
            Prim::I16 => (i16::MIN.into(), i16::MAX.into()),
            Prim::U32 => (0, u32::MAX.into()),
            Prim::I32 => (i32::MIN.into(), i32::MAX.into()),
            Prim::U64 => (0, u64::MAX.into()),
            Prim::I64 => (i64::MIN.into(), i64::MAX.into()),
        };
        if n == max {
            format!("{}::MAX", self.rust())
        } else if n == min && min != 0 {
            format!("{}::MIN", self.rust())
        } else {
            self.literal(v)
        }
    }

    /// SBE's null when the schema gives none.
    fn default_null(self) -> String {
        match self {
            Prim::Char => "0_u8".into(),
            Prim::U8 | Prim::U16 | Prim::U32 | Prim::U64 => format!("{}::MAX", self.rust()),
            _ => format!("{}::MIN", self.rust()),
        }
    }
}

/// A type of the schema's `<types>`.
#[derive(Clone, Debug)]
enum Ty {
    Prim {
        prim: Prim,
        length: usize,
        /// The null literal of an optional type.
        null: Option<String>,
        /// The value of a constant type (no bytes on the wire).
        constant: Option<String>,
    },
    Composite {
        members: Vec<Member>,
        size: usize,
    },
    Enum {
        prim: Prim,
        null: Option<String>,
    },
    Set {
        prim: Prim,
    },
}

#[derive(Clone, Debug)]
struct Member {
    name: String,
    ty: Ty,
    offset: usize,
}

impl Ty {
    fn size(&self) -> usize {
        match self {
            Ty::Prim {
                constant: Some(_), ..
            } => 0,
            Ty::Prim { prim, length, .. } => prim.size() * length,
            Ty::Composite { size, .. } => *size,
            Ty::Enum { prim, .. } | Ty::Set { prim } => prim.size(),
        }
    }
}

fn prim_type(n: roxmltree::Node) -> Ty {
    let prim = Prim::parse(n.attribute("primitiveType").expect("primitiveType"));
    let length = n
        .attribute("length")
        .map_or(1, |l| l.parse().expect("length"));
    let presence = n.attribute("presence").unwrap_or("required");
    let null = (presence == "optional").then(|| {
        n.attribute("nullValue")
            .map_or_else(|| prim.default_null(), |v| prim.null_literal(v))
    });
    let constant = (presence == "constant").then(|| n.text().unwrap_or("").trim().to_string());
    Ty::Prim {
        prim,
        length,
        null,
        constant,
    }
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    id: String,
    type_name: String,
    ty: Ty,
    offset: usize,
    since: u16,
    description: String,
}

#[derive(Clone, Debug)]
struct Group {
    name: String,
    id: String,
    block_length: usize,
    dimension: String,
    since: u16,
    fields: Vec<Field>,
    description: String,
}

#[derive(Clone, Debug)]
struct Message {
    name: String,
    has_data: bool,
    id: u16,
    block_length: usize,
    since: u16,
    semantic_type: String,
    description: String,
    fields: Vec<Field>,
    groups: Vec<Group>,
}

/// An enum or set of the schema, for the constants module.
#[derive(Clone, Debug)]
struct Values {
    kind: &'static str,
    encoding: String,
    prim: Prim,
    /// (name, value, sinceVersion, description).
    values: Vec<(String, String, u16, String)>,
}

struct Schema {
    version: u16,
    types: HashMap<String, Ty>,
    values: BTreeMap<String, Values>,
    messages: BTreeMap<u16, Message>,
}

fn since(n: roxmltree::Node) -> u16 {
    n.attribute("sinceVersion")
        .map_or(0, |s| s.parse().expect("sinceVersion"))
}

fn description(n: roxmltree::Node) -> String {
    n.attribute("description")
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/venue/cme_mdp3/schema")
}

fn schema_path(version: u16) -> PathBuf {
    schema_dir().join(format!("Cme.Futures.Mdp3.Sbe.v1.{version}.xml"))
}

fn load(version: u16) -> Schema {
    let path = schema_path(version);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    parse_schema(&text, version)
}

fn parse_schema(text: &str, version: u16) -> Schema {
    let doc = roxmltree::Document::parse(text).expect("schema XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "messageSchema");
    assert_eq!(root.attribute("id"), Some("1"), "schemaId");
    assert_eq!(
        root.attribute("version"),
        Some(version.to_string().as_str()),
        "the file's version"
    );
    assert_eq!(root.attribute("byteOrder"), Some("littleEndian"));
    let types_node = root
        .children()
        .find(|n| n.has_tag_name("types"))
        .expect("<types>");

    let mut types = HashMap::new();
    // Plain types first: enums and sets name them as their encoding.
    for n in types_node.children().filter(|n| n.has_tag_name("type")) {
        types.insert(n.attribute("name").unwrap().to_string(), prim_type(n));
    }
    let mut values = BTreeMap::new();
    for n in types_node.children().filter(|n| n.is_element()) {
        let name = n.attribute("name").unwrap().to_string();
        match n.tag_name().name() {
            "type" => {}
            "composite" => {
                let mut members = Vec::new();
                let mut pos = 0;
                for m in n.children().filter(|m| m.has_tag_name("type")) {
                    let ty = prim_type(m);
                    let offset = m
                        .attribute("offset")
                        .map_or(pos, |o| o.parse().expect("offset"));
                    pos = offset + ty.size();
                    members.push(Member {
                        name: m.attribute("name").unwrap().to_string(),
                        ty,
                        offset,
                    });
                }
                assert!(
                    n.children()
                        .all(|m| !m.is_element() || m.has_tag_name("type")),
                    "composite {name}: only <type> members are supported"
                );
                types.insert(name, Ty::Composite { members, size: pos });
            }
            kind @ ("enum" | "set") => {
                let encoding = n.attribute("encodingType").unwrap().to_string();
                let (prim, null) = match types.get(&encoding) {
                    Some(Ty::Prim { prim, null, .. }) => (*prim, null.clone()),
                    Some(other) => panic!("{name}: encoding {encoding} is {other:?}"),
                    None => (Prim::parse(&encoding), None),
                };
                let mut vals = Vec::new();
                for v in n.children().filter(|v| v.is_element()) {
                    vals.push((
                        v.attribute("name").unwrap().to_string(),
                        v.text().unwrap_or("").trim().to_string(),
                        since(v),
                        description(v),
                    ));
                }
                let ty = if kind == "enum" {
                    Ty::Enum { prim, null }
                } else {
                    Ty::Set { prim }
                };
                types.insert(name.clone(), ty);
                values.insert(
                    name,
                    Values {
                        kind: if kind == "enum" { "enum" } else { "set" },
                        encoding,
                        prim,
                        values: vals,
                    },
                );
            }
            other => panic!("type kind <{other}>"),
        }
    }

    let fields_of = |node: roxmltree::Node, owner: &str| -> Vec<Field> {
        let mut out = Vec::new();
        let mut pos = 0;
        for f in node.children().filter(|f| f.has_tag_name("field")) {
            let name = f.attribute("name").unwrap().to_string();
            let type_name = f.attribute("type").unwrap().to_string();
            let ty = types
                .get(&type_name)
                .unwrap_or_else(|| panic!("{owner}.{name}: type {type_name}"))
                .clone();
            let offset = f
                .attribute("offset")
                .map_or(pos, |o| o.parse().expect("offset"));
            pos = offset + ty.size();
            assert!(
                f.attribute("presence").is_none(),
                "{owner}.{name}: field presence attributes are not supported"
            );
            out.push(Field {
                name,
                id: f.attribute("id").unwrap_or("").to_string(),
                type_name,
                ty,
                offset,
                since: since(f),
                description: description(f),
            });
        }
        out
    };

    let mut messages = BTreeMap::new();
    for m in root.children().filter(|m| m.has_tag_name("message")) {
        let name = m.attribute("name").unwrap().to_string();
        let id: u16 = m.attribute("id").unwrap().parse().unwrap();
        let fields = fields_of(m, &name);
        let mut groups = Vec::new();
        let mut seen_group = false;
        for c in m.children().filter(|c| c.is_element()) {
            match c.tag_name().name() {
                "field" => assert!(!seen_group, "{name}: a field after a group"),
                "group" => {
                    seen_group = true;
                    let gname = c.attribute("name").unwrap().to_string();
                    assert!(
                        c.children()
                            .all(|x| !x.is_element() || x.has_tag_name("field")),
                        "{name}.{gname}: nested groups and data are not supported"
                    );
                    groups.push(Group {
                        fields: fields_of(c, &gname),
                        name: gname,
                        id: c.attribute("id").unwrap_or("").to_string(),
                        block_length: c.attribute("blockLength").unwrap().parse().unwrap(),
                        dimension: c.attribute("dimensionType").unwrap().to_string(),
                        since: since(c),
                        description: description(c),
                    });
                }
                // Variable-length data: only templates this module does
                // not generate have it (checked when generating).
                "data" => seen_group = true,
                other => panic!("{name}: <{other}>"),
            }
        }
        messages.insert(
            id,
            Message {
                has_data: m.children().any(|c| c.has_tag_name("data")),
                name,
                id,
                block_length: m.attribute("blockLength").unwrap().parse().unwrap(),
                since: since(m),
                semantic_type: m.attribute("semanticType").unwrap_or("").to_string(),
                description: description(m),
                fields,
                groups,
            },
        );
    }
    Schema {
        version,
        types,
        values,
        messages,
    }
}

fn snake(name: &str) -> String {
    let c: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &ch) in c.iter().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            let prev = c[i - 1];
            let next_lower = c.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                out.push('_');
            }
        }
        out.push(ch.to_ascii_lowercase());
    }
    match out.as_str() {
        "type" | "match" | "ref" | "mod" | "self" | "use" | "fn" => format!("{out}_"),
        _ => out,
    }
}

fn screaming(name: &str) -> String {
    snake(name).trim_end_matches('_').to_ascii_uppercase()
}

fn camel(name: &str) -> String {
    snake(name)
        .split('_')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut c = s.chars();
            let first = c.next().unwrap().to_ascii_uppercase();
            std::iter::once(first).chain(c).collect::<String>()
        })
        .collect()
}

/// A description as doc text (no link or HTML syntax).
fn doc(s: &str) -> String {
    s.replace('[', "(")
        .replace(']', ")")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "'")
}

/// The layout rules of one template across every schema file that has it.
fn check_versions(t: u16, chosen: &Message, from: u16, all: &[Schema]) {
    let same = |what: &str, v: u16, old: &[Field], new: &[Field], old_len: usize| {
        for f in old {
            let n = new
                .iter()
                .find(|n| n.name == f.name)
                .unwrap_or_else(|| panic!("{t} {what}.{}: in v{v}, not in v{from}", f.name));
            assert_eq!(
                (n.offset, n.ty.size(), &n.type_name),
                (f.offset, f.ty.size(), &f.type_name),
                "template {t} {what}.{}: v{v} and v{from} differ",
                f.name
            );
            assert!(
                n.since <= v,
                "template {t} {what}.{}: v{v} has it, v{from} says since {}",
                f.name,
                n.since
            );
        }
        for n in new {
            let present = n.since <= v;
            let in_old = old.iter().any(|f| f.name == n.name);
            assert_eq!(
                present,
                in_old,
                "template {t} {what}.{}: since {} but v{v} {} it",
                n.name,
                n.since,
                if in_old { "has" } else { "lacks" }
            );
            if present {
                assert!(
                    n.offset + n.ty.size() <= old_len,
                    "template {t} {what}.{}: past v{v}'s blockLength {old_len}",
                    n.name
                );
            }
        }
    };
    for s in all {
        let Some(old) = s.messages.get(&t) else {
            continue;
        };
        let v = s.version;
        same("root", v, &old.fields, &chosen.fields, old.block_length);
        let present: Vec<&Group> = chosen.groups.iter().filter(|g| g.since <= v).collect();
        let names = |gs: &[&Group]| gs.iter().map(|g| g.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&present),
            names(&old.groups.iter().collect::<Vec<_>>()),
            "template {t}: groups of v{v} against v{from}'s sinceVersion"
        );
        for (n, o) in present.iter().zip(&old.groups) {
            assert_eq!(n.dimension, o.dimension, "template {t} {}", n.name);
            same(&n.name, v, &o.fields, &n.fields, o.block_length);
        }
    }
}

struct Out {
    text: String,
}

impl Out {
    fn line(&mut self, s: impl AsRef<str>) {
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }
}

/// The accessor of a field: (return type, body reading `blk`).
fn accessor(f: &Field, spec: &str, blk: &str) -> (String, String) {
    match &f.ty {
        Ty::Prim {
            constant: Some(v),
            prim,
            length,
            ..
        } => {
            assert_eq!(*length, 1, "{}: constant arrays", f.name);
            (prim.rust().to_string(), prim.literal(v))
        }
        Ty::Prim {
            prim, length, null, ..
        } => {
            if *length > 1 {
                assert_eq!(*prim, Prim::Char, "{}: non-char arrays", f.name);
                return ("Option<&'a [u8]>".into(), format!("{blk}.get({spec})"));
            }
            let read = format!("{blk}.{}({spec})", prim.rust());
            let body = match null {
                Some(n) => format!("{read}.filter(|&v| v != {n})"),
                None => read,
            };
            (format!("Option<{}>", prim.rust()), body)
        }
        Ty::Enum { prim, null } => {
            let read = format!("{blk}.{}({spec})", prim.rust());
            let body = match null {
                Some(n) => format!("{read}.filter(|&v| v != {n})"),
                None => read,
            };
            (format!("Option<{}>", prim.rust()), body)
        }
        Ty::Set { prim } => (
            format!("Option<{}>", prim.rust()),
            format!("{blk}.{}({spec})", prim.rust()),
        ),
        Ty::Composite { members, size } => {
            let mantissa = members.iter().find(|m| m.name == "mantissa");
            let exponent = members.iter().find(|m| m.name == "exponent");
            match (mantissa, exponent, members.len()) {
                (
                    Some(Member {
                        ty:
                            Ty::Prim {
                                prim,
                                null,
                                constant: None,
                                ..
                            },
                        offset: 0,
                        ..
                    }),
                    Some(Member {
                        ty:
                            Ty::Prim {
                                constant: Some(e), ..
                            },
                        ..
                    }),
                    2,
                ) => {
                    assert_eq!(prim.size(), *size, "{}: decimal layout", f.name);
                    let e: i8 = e.parse().expect("exponent");
                    let read = format!("{blk}.{}({spec})", prim.rust());
                    let read = match null {
                        Some(n) => format!("{read}.filter(|&v| v != {n})"),
                        None => read,
                    };
                    let mantissa = if *prim == Prim::I64 {
                        "m"
                    } else {
                        "i64::from(m)"
                    };
                    (
                        "Option<Decimal>".into(),
                        format!(
                            "{read}.map(|m| Decimal {{ mantissa: {mantissa}, exponent: {e} }})"
                        ),
                    )
                }
                _ => ("Option<&'a [u8]>".into(), format!("{blk}.get({spec})")),
            }
        }
    }
}

fn type_doc(f: &Field) -> String {
    let extra = match &f.ty {
        Ty::Enum { .. } => format!(
            ", values in [`{TEMPLATES_PATH}::enums::{}`]",
            snake(&f.type_name)
        ),
        Ty::Set { .. } => format!(
            ", bits in [`{TEMPLATES_PATH}::sets::{}`]",
            snake(&f.type_name)
        ),
        Ty::Composite { members, .. } => match members.iter().find(|m| m.name == "exponent") {
            Some(Member {
                ty: Ty::Prim {
                    constant: Some(e), ..
                },
                ..
            }) => format!(", mantissa x 10^{e}"),
            _ => String::new(),
        },
        Ty::Prim {
            null: Some(n),
            constant: None,
            ..
        } => format!(", null {n}"),
        _ => String::new(),
    };
    let since = if f.since > 0 {
        format!(", since version {}", f.since)
    } else {
        String::new()
    };
    format!(
        "`{}` (tag {}, `{}`{extra}{since}): {}",
        f.name,
        f.id,
        f.type_name,
        doc(&f.description)
    )
}

/// The generated module's path, for doc links.
const TEMPLATES_PATH: &str = "crate::venue::cme_mdp3::templates";

fn spec_const(o: &mut Out, f: &Field) {
    if f.ty.size() == 0 {
        return;
    }
    o.line(format!("/// {}", type_doc(f)));
    o.line(format!(
        "pub const {}: FieldSpec = FieldSpec::new({}, {}, {});",
        screaming(&f.name),
        f.offset,
        f.ty.size(),
        f.since
    ));
}

fn accessor_fn(o: &mut Out, f: &Field, spec_path: &str, blk: &str) {
    let (ret, body) = accessor(f, &format!("{spec_path}{}", screaming(&f.name)), blk);
    if f.ty.size() == 0 {
        o.line(format!("/// {} (constant)", type_doc(f)));
    } else {
        o.line(format!(
            "/// `{}`: see [`{spec_path}{}`].",
            f.name,
            screaming(&f.name)
        ));
    }
    o.line("#[inline]");
    o.line(format!(
        "pub fn {}(&self) -> {ret} {{ {body} }}",
        snake(&f.name)
    ));
}

fn generate(schemas: &[Schema]) -> String {
    let mut o = Out {
        text: String::new(),
    };
    o.line("// @generated by tests/cme_sbe_codegen.rs from schema/*.xml: do not edit.");
    o.line("//! CME MDP 3.0 SBE decoders, generated from CME's published schemas");
    o.line(format!(
        "//! (`schema/`, versions {}) by `tests/cme_sbe_codegen.rs`: do not edit;",
        VERSIONS
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    o.line("//! change the generator or a schema and run");
    o.line("//! `TICKGATE_REGENERATE=1 cargo test --test cme_sbe_codegen`.");
    o.line("//!");
    o.line("//! One module per template, from the latest schema that defines it (the");
    o.line("//! generator checks that every other schema file agrees with it, whatever");
    o.line("//! an older one lacks being marked with a later `sinceVersion`): a field");
    o.line("//! constant (`FieldSpec`: offset, length, `sinceVersion`), a view over the");
    o.line("//! message (`Message`) whose accessors read `None` for a field the");
    o.line("//! message's version or its wire block does not carry, or that holds the");
    o.line("//! schema's null; a view per repeating-group entry. Roots and entries are");
    o.line("//! as long as the wire says (`blockLength` of the message and group");
    o.line("//! headers), not the schema.");
    o.line("");
    o.line("use super::sbe::{Block, Decimal, Dimension, FieldSpec, Group, GroupSpec, Layout, MessageHeader, RawMessage, SbeError, SCHEMA_ID};");
    o.line("");
    o.line("/// The schema versions the decoders were generated and checked against.");
    o.line(format!(
        "pub const SCHEMA_VERSIONS: [u16; {}] = {:?};",
        VERSIONS.len(),
        VERSIONS
    ));
    o.line("");
    o.line("/// The templates decoded here; any other is unknown.");
    o.line(format!(
        "pub const TEMPLATE_IDS: [u16; {}] = {:?};",
        TEMPLATES.len(),
        TEMPLATES
    ));
    o.line("");

    // Dimensions, from the latest schema.
    let latest = schemas.last().unwrap();
    let mut dims: Vec<String> = Vec::new();
    let mut messages: Vec<(&Message, u16)> = Vec::new();
    for &t in TEMPLATES {
        let s = schemas
            .iter()
            .rev()
            .find(|s| s.messages.contains_key(&t))
            .unwrap_or_else(|| panic!("template {t} is in no schema"));
        let m = &s.messages[&t];
        assert!(!m.has_data, "template {t}: variable-length data");
        check_versions(t, m, s.version, schemas);
        for g in &m.groups {
            if !dims.contains(&g.dimension) {
                dims.push(g.dimension.clone());
            }
        }
        messages.push((m, s.version));
    }
    dims.sort();
    for d in &dims {
        let Some(Ty::Composite { members, size }) = latest.types.get(d) else {
            panic!("dimension {d}");
        };
        let block = members.iter().find(|m| m.name == "blockLength").unwrap();
        let num = members.iter().find(|m| m.name == "numInGroup").unwrap();
        assert!(
            block.offset == 0 && block.ty.size() == 2,
            "{d}: blockLength u16 at 0"
        );
        assert!(matches!(num.ty.size(), 1 | 2), "{d}: numInGroup");
        for s in schemas {
            if let Some(Ty::Composite { size: old, .. }) = s.types.get(d) {
                assert_eq!(old, size, "{d} in v{}", s.version);
            }
        }
        o.line(format!(
            "/// The `{d}` group header: blockLength u16 at 0, numInGroup at {}, {size} bytes.",
            num.offset
        ));
        o.line(format!(
            "pub const {}: Dimension = Dimension {{ header_len: {size}, num_offset: {}, num_len: {} }};",
            screaming(d),
            num.offset,
            num.ty.size()
        ));
        o.line("");
    }

    // Enums and sets used by the generated fields, from the latest schema
    // that defines each (older ones must agree).
    let mut used: BTreeMap<String, ()> = BTreeMap::new();
    for (m, _) in &messages {
        for f in m
            .fields
            .iter()
            .chain(m.groups.iter().flat_map(|g| g.fields.iter()))
        {
            if matches!(f.ty, Ty::Enum { .. } | Ty::Set { .. }) {
                used.insert(f.type_name.clone(), ());
            }
        }
    }
    for kind in ["enum", "set"] {
        let module = if kind == "enum" { "enums" } else { "sets" };
        o.line(format!(
            "/// The values of the schema's {kind}s, by name (from the latest schema defining each)."
        ));
        o.line(format!("pub mod {module} {{"));
        for name in used.keys() {
            let v = schemas
                .iter()
                .rev()
                .find_map(|s| s.values.get(name))
                .unwrap();
            if v.kind != kind {
                continue;
            }
            for s in schemas {
                if let Some(old) = s.values.get(name) {
                    // Names were edited over the years (v5's
                    // `OpeningPrice` is `OpenPrice` later); values stay.
                    for (n, val, _, _) in &old.values {
                        assert!(
                            v.values.iter().any(|(_, v2, _, _)| v2 == val),
                            "{name}.{n} = {val} in v{} only",
                            s.version
                        );
                    }
                }
            }
            o.line(format!("/// `{name}` ({}).", v.encoding));
            o.line(format!("pub mod {} {{", snake(name)));
            for (n, val, since, d) in &v.values {
                let since = if *since > 0 {
                    format!(" (since version {since})")
                } else {
                    String::new()
                };
                o.line(format!("/// {}{since}", doc(d)));
                if kind == "enum" {
                    o.line(format!(
                        "pub const {}: {} = {};",
                        screaming(n),
                        v.prim.rust(),
                        v.prim.literal(val)
                    ));
                } else {
                    o.line(format!(
                        "pub const {}: {} = 1 << {};",
                        screaming(n),
                        v.prim.rust(),
                        val
                    ));
                }
            }
            o.line("}");
        }
        o.line("}");
        o.line("");
    }

    for (m, from) in &messages {
        let module = snake(&m.name);
        let lengths: Vec<String> = schemas
            .iter()
            .filter_map(|s| {
                s.messages
                    .get(&m.id)
                    .map(|x| format!("({}, {})", s.version, x.block_length))
            })
            .collect();
        o.line(format!(
            "/// `{}`: template {}, semanticType `{}`{}. {}",
            m.name,
            m.id,
            m.semantic_type,
            if m.since > 0 {
                format!(", since version {}", m.since)
            } else {
                String::new()
            },
            doc(&m.description)
        ));
        o.line(format!("pub mod {module} {{"));
        o.line("use super::*;");
        o.line(format!("pub const TEMPLATE_ID: u16 = {};", m.id));
        o.line(format!("pub const NAME: &str = \"{}\";", m.name));
        o.line("/// The schema version this decoder was generated from.");
        o.line(format!("pub const SOURCE_VERSION: u16 = {from};"));
        o.line("/// The root's blockLength in each schema file that defines the template.");
        o.line(format!(
            "pub const BLOCK_LENGTHS: [(u16, u16); {}] = [{}];",
            lengths.len(),
            lengths.join(", ")
        ));
        let n = m.groups.len();
        o.line("/// The repeating groups, in wire order.");
        o.line(format!("pub const GROUPS: [GroupSpec; {n}] = ["));
        for g in &m.groups {
            o.line(format!(
                "GroupSpec {{ dimension: {}, since: {} }},",
                screaming(&g.dimension),
                g.since
            ));
        }
        o.line("];");
        for f in &m.fields {
            spec_const(&mut o, f);
        }
        o.line("");
        o.line("/// The message: its root and groups, as laid out on the wire.");
        o.line("#[derive(Clone, Copy, Debug, PartialEq, Eq)]");
        o.line(format!(
            "pub struct Message<'a> {{ layout: Layout<'a, {n}> }}"
        ));
        o.line("impl<'a> Message<'a> {");
        o.line("/// Lays the message out (root, then the groups its version carries), checking that each lies within it.");
        o.line("#[inline]");
        o.line("pub fn new(header: MessageHeader, body: &'a [u8], offset: usize) -> Result<Self, SbeError> {");
        o.line("Layout::new(header, body, &GROUPS, offset).map(|layout| Message { layout })");
        o.line("}");
        o.line("/// The root block (the header's blockLength).");
        o.line("#[inline]");
        o.line("pub fn root(&self) -> Block<'a> { self.layout.root }");
        o.line("/// The schema version of the message (its header's).");
        o.line("#[inline]");
        o.line("pub fn version(&self) -> u16 { self.layout.root.version() }");
        for f in &m.fields {
            accessor_fn(&mut o, f, "", "self.layout.root");
        }
        for (i, g) in m.groups.iter().enumerate() {
            let since = if g.since > 0 {
                format!(" Since version {}: empty before.", g.since)
            } else {
                String::new()
            };
            o.line(format!(
                "/// `{}` (tag {}, `{}`): {}.{since}",
                g.name,
                g.id,
                g.dimension,
                doc(&g.description)
            ));
            o.line("#[inline]");
            o.line(format!(
                "pub fn {}(&self) -> Group<'a, {}<'a>> {{ Group::new(self.layout.groups[{i}], self.version()) }}",
                snake(&g.name),
                camel(&g.name)
            ));
        }
        o.line("/// Reads every field of the root and of every group entry and");
        o.line("/// counts those present (not null, carried by the version and the");
        o.line("/// block): every accessor at once, for tests and fuzzing.");
        o.line("pub fn fields_present(&self) -> usize {");
        if m.groups.is_empty() && m.fields.iter().all(|f| f.ty.size() == 0) {
            o.line("0");
            o.line("}");
            o.line("}");
        } else {
            o.line("let mut n = 0;");
            for f in m.fields.iter().filter(|f| f.ty.size() > 0) {
                o.line(format!(
                    "n += usize::from(self.{}().is_some());",
                    snake(&f.name)
                ));
            }
            for g in &m.groups {
                o.line(format!("for e in self.{}() {{", snake(&g.name)));
                for f in g.fields.iter().filter(|f| f.ty.size() > 0) {
                    o.line(format!(
                        "n += usize::from(e.{}().is_some());",
                        snake(&f.name)
                    ));
                }
                o.line("}");
            }
            o.line("n");
            o.line("}");
            o.line("}");
        }
        for g in &m.groups {
            let gm = snake(&g.name);
            let gs = camel(&g.name);
            o.line(format!("/// The fields of a `{}` entry.", g.name));
            o.line(format!("pub mod {gm} {{"));
            o.line("use super::super::FieldSpec;");
            o.line("/// The entries' blockLength in the schema (the wire's may differ).");
            o.line(format!("pub const BLOCK_LENGTH: u16 = {};", g.block_length));
            for f in &g.fields {
                spec_const(&mut o, f);
            }
            o.line("}");
            o.line(format!(
                "/// One `{}` entry (as long as the group header's blockLength).",
                g.name
            ));
            o.line("#[derive(Clone, Copy, Debug, PartialEq, Eq)]");
            o.line(format!("pub struct {gs}<'a>(Block<'a>);"));
            o.line(format!(
                "impl<'a> From<Block<'a>> for {gs}<'a> {{ fn from(b: Block<'a>) -> Self {{ {gs}(b) }} }}"
            ));
            o.line(format!("impl<'a> {gs}<'a> {{"));
            o.line("/// The entry's bytes.");
            o.line("#[inline]");
            o.line("pub fn block(&self) -> Block<'a> { self.0 }");
            for f in &g.fields {
                accessor_fn(&mut o, f, &format!("{gm}::"), "self.0");
            }
            o.line("}");
        }
        o.line("}");
        o.line("");
    }

    o.line("/// A message of one of the templates decoded here.");
    o.line("#[derive(Clone, Copy, Debug, PartialEq, Eq)]");
    o.line("pub enum Message<'a> {");
    for (m, _) in &messages {
        o.line(format!(
            "{}({}::Message<'a>),",
            camel(&m.name),
            snake(&m.name)
        ));
    }
    o.line("}");
    o.line("");
    o.line("/// Decodes a framed message: `None` when its schemaId is not CME's (1) or");
    o.line("/// its template is not one of [`TEMPLATE_IDS`] (the caller skips it by");
    o.line("/// MsgSize); an error when its root or a group runs past it.");
    o.line("#[inline]");
    o.line("pub fn decode<'a>(m: &RawMessage<'a>) -> Option<Result<Message<'a>, SbeError>> {");
    o.line("if m.header.schema_id != SCHEMA_ID { return None; }");
    o.line("Some(match m.header.template_id {");
    for (m, _) in &messages {
        o.line(format!(
            "{} => {}::Message::new(m.header, m.body, m.offset).map(Message::{}),",
            m.id,
            snake(&m.name),
            camel(&m.name)
        ));
    }
    o.line("_ => return None,");
    o.line("})");
    o.line("}");
    o.line("");
    o.line("impl Message<'_> {");
    o.line("/// The message's `fields_present`.");
    o.line("pub fn fields_present(&self) -> usize {");
    o.line("match self {");
    for (m, _) in &messages {
        o.line(format!(
            "Message::{}(m) => m.fields_present(),",
            camel(&m.name)
        ));
    }
    o.line("}");
    o.line("}");
    o.line("}");
    o.line("");
    o.line("/// The schema's name of a template decoded here.");
    o.line("pub fn template_name(id: u16) -> Option<&'static str> {");
    o.line("Some(match id {");
    for (m, _) in &messages {
        o.line(format!("{} => {}::NAME,", m.id, snake(&m.name)));
    }
    o.line("_ => return None,");
    o.line("})");
    o.line("}");
    o.text
}

fn rustfmt(src: &str) -> String {
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2021", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rustfmt (rustup component add rustfmt)");
    let mut stdin = child.stdin.take().unwrap();
    let input = src.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "rustfmt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn generated_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/venue/cme_mdp3/templates.rs")
}

#[test]
fn checked_in_decoders_equal_the_generated_ones() {
    let schemas: Vec<Schema> = VERSIONS.iter().map(|&v| load(v)).collect();
    let text = rustfmt(&generate(&schemas));
    let path = generated_path();
    if std::env::var_os("TICKGATE_REGENERATE").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == text,
        "{} is not what the schemas generate: run TICKGATE_REGENERATE=1 cargo test --test cme_sbe_codegen",
        path.display()
    );
}

/// Only the schema files named above are in the schema folder (a file
/// added there without being generated from would be a silent no-op).
#[test]
fn every_schema_file_is_generated_from() {
    let mut names: Vec<String> = std::fs::read_dir(schema_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    names.sort();
    let mut want: Vec<String> = VERSIONS
        .iter()
        .map(|v| format!("Cme.Futures.Mdp3.Sbe.v1.{v}.xml"))
        .collect();
    want.sort();
    assert_eq!(names, want);
}

/// The version check refuses a schema file that moves a field or adds one
/// without a later `sinceVersion`.
#[test]
fn inconsistent_versions_are_refused() {
    let v9 = std::fs::read_to_string(schema_path(9)).unwrap();
    let v8 = std::fs::read_to_string(schema_path(8)).unwrap();
    let book = r#"<field name="RptSeq" id="83" type="uInt32" description="Market Data entry sequence number per instrument update" offset="16" semanticType="int"/>"#;
    assert!(v8.contains(book));
    for (what, replacement) in [
        ("moved", book.replace("offset=\"16\"", "offset=\"17\"")),
        (
            "added without sinceVersion",
            format!(
                "{book}<field name=\"Extra\" id=\"1\" type=\"uInt8\" description=\"x\" offset=\"27\"/>"
            ),
        ),
    ] {
        let bad = v8.replacen(book, &replacement, 1);
        let schemas = vec![parse_schema(&bad, 8), parse_schema(&v9, 9)];
        let chosen = schemas[1].messages[&32].clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_versions(32, &chosen, 9, &schemas)
        }));
        assert!(r.is_err(), "{what}: accepted");
    }
    // The real files pass.
    let schemas = vec![parse_schema(&v8, 8), parse_schema(&v9, 9)];
    check_versions(32, &schemas[1].messages[&32].clone(), 9, &schemas);
}

#[test]
fn names_convert_to_rust() {
    assert_eq!(snake("MDEntryPx"), "md_entry_px");
    assert_eq!(snake("SecurityID"), "security_id");
    assert_eq!(snake("NoMDEntries"), "no_md_entries");
    assert_eq!(
        snake("MDIncrementalRefreshBook32"),
        "md_incremental_refresh_book32"
    );
    assert_eq!(snake("CFICode"), "cfi_code");
    assert_eq!(camel("NoMDEntries"), "NoMdEntries");
    assert_eq!(
        screaming("LastMsgSeqNumProcessed"),
        "LAST_MSG_SEQ_NUM_PROCESSED"
    );
}
