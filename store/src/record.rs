//! The record codec: an event record is its head (every field of
//! [`StoredEvent`] but the body), the object's Table row if any, then the
//! body's JSON, LZ4-compressed (with its resource type's dictionary once
//! there is one) when that makes it smaller. Encoding, decoding whole
//! records, heads alone (read by hand for serving) and bodies, and the
//! making of the compression dictionaries.
//!
//! A record of format `kubefold-store/6`, in the layout of [`crate::codec`]:
//!
//! | field | encoding |
//! |---|---|
//! | [`RECORD_TAG`] | byte 0xFE |
//! | RV | varint |
//! | event type | varint: 0 ADDED, 1 MODIFIED, 2 DELETED |
//! | resource | string |
//! | namespace, name, cluster | strings |
//! | previous RV | varint |
//! | member RV, uid | strings |
//! | labels, then selectable fields | each a sequence of (string, string) |
//! | commit time (Unix ms) | varint |
//! | name end, RV splice point, body length | varints (u32) |
//! | body encoding | byte ([`BODY_RAW`], [`BODY_LZ4`], [`BODY_LZ4_DICT`], plus [`BODY_WITH_ROW`]) |
//! | Table row, when [`BODY_WITH_ROW`] | metadata start, end and template length (u32, little-endian), template |
//! | body | the rest |
//!
//! A record written by format 5 or older has the same fields in the same
//! order without the tag, in bincode's layout ([`crate::codec::Reader::old`]);
//! its first byte, the start of its RV, is never 0xFE. Such records stay
//! where they are and are read as they are.

use super::*;

/// How an event's body is stored after its head: as it is, LZ4, or LZ4
/// with the dictionary of the event's resource type.
pub(crate) const BODY_RAW: u8 = 0;
pub(crate) const BODY_LZ4: u8 = 1;
pub(crate) const BODY_LZ4_DICT: u8 = 2;
/// Set in a record's body encoding when the object's Table row
/// ([`kubefold_engine::object::TableRow`]) comes between the head and the
/// body: its metadata start and end and its template's length (each a u32,
/// little-endian), then the template.
pub(crate) const BODY_WITH_ROW: u8 = 0x80;

/// A resource type's compression dictionary is made of the first bodies of
/// that type committed in one batch: at least this many bytes of them...
pub(crate) const DICT_MIN_BYTES: usize = 4 * 1024;
/// ... and at most this many (LZ4 reaches back 64 KiB).
pub(crate) const DICT_MAX_BYTES: usize = 16 * 1024;
/// Compression dictionaries by resource type (immutable once written).
pub type Dicts = std::collections::HashMap<String, std::sync::Arc<[u8]>>;

/// Largest record the store decodes: no length read from a damaged record
/// can make decoding allocate more than this.
pub(crate) const MAX_RECORD_BYTES: usize = codec::MAX_BYTES;

/// First byte of a record of format 6 (see the module's documentation).
pub(crate) const RECORD_TAG: u8 = 0xFE;

/// The head of an event record as read: every field of [`StoredEvent`]
/// but the body's bytes.
pub(crate) struct EventHead {
    pub(crate) rv: u64,
    pub(crate) event_type: EventType,
    pub(crate) resource: String,
    pub(crate) key: ObjectKey,
    pub(crate) prev_rv: u64,
    pub(crate) member_rv: String,
    pub(crate) uid: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) time_ms: u64,
    pub(crate) name_end: u32,
    pub(crate) rv_at: u32,
    pub(crate) body_len: u32,
    pub(crate) body_codec: u8,
}

impl EventHead {
    /// The event with `json` as its body and `row` as its Table row.
    pub(crate) fn into_event(self, json: Vec<u8>, row: Option<TableRow>) -> StoredEvent {
        StoredEvent {
            rv: self.rv,
            event_type: self.event_type,
            resource: self.resource,
            key: self.key,
            prev_rv: self.prev_rv,
            member_rv: self.member_rv,
            uid: self.uid,
            labels: self.labels,
            fields: self.fields,
            body: ServedBody { json, name_end: self.name_end, rv_at: self.rv_at, row },
            time_ms: self.time_ms,
        }
    }
}

/// Encodes one event as the store writes it (the value of an `e` record)
/// when its type has no dictionary: the head, then the body, LZ4-compressed
/// when that is smaller.
pub fn encode_event(event: &StoredEvent) -> Result<Vec<u8>> {
    encode_event_with(event, None, &mut Compressors::default())
}

/// Bodies' compression state kept between events: the prepared
/// dictionaries (see [`lz4`]) and scratch space.
#[derive(Default)]
pub(crate) struct Compressors {
    /// By resource type: the dictionary (its identity: a type's dictionary
    /// forgotten after a failed commit is made again, different) and its
    /// preparation.
    pub(crate) prepared: std::collections::HashMap<String, (std::sync::Arc<[u8]>, std::sync::Arc<lz4::Prepared>)>,
    /// For types without a dictionary.
    pub(crate) plain: Option<std::sync::Arc<lz4::Prepared>>,
    pub(crate) table: Vec<u32>,
    pub(crate) body: Vec<u8>,
}

impl Compressors {
    /// The compressor for `dict`, the dictionary of `resource` (none: plain
    /// LZ4), prepared on first use.
    pub(crate) fn get(&mut self, resource: &str, dict: Option<&std::sync::Arc<[u8]>>) -> std::sync::Arc<lz4::Prepared> {
        match dict {
            None => self.plain.get_or_insert_with(|| std::sync::Arc::new(lz4::Prepared::new(b""))).clone(),
            Some(dict) => match self.prepared.get(resource) {
                Some((known, prepared)) if std::sync::Arc::ptr_eq(known, dict) => prepared.clone(),
                _ => {
                    let prepared = std::sync::Arc::new(lz4::Prepared::new(dict));
                    self.prepared.insert(resource.to_string(), (dict.clone(), prepared.clone()));
                    prepared
                }
            },
        }
    }
}

/// Encodes records for a store that keeps its dictionaries elsewhere (the
/// shared log on etcd keeps them in etcd): [`encode_event`] with the
/// dictionary of each event's type, the dictionaries' preparation kept
/// between events.
#[derive(Default)]
pub struct RecordEncoder(Compressors);

impl RecordEncoder {
    /// The record of `event`, its body compressed with `dict` (the
    /// dictionary of its type) when given.
    pub fn encode(&mut self, event: &StoredEvent, dict: Option<&std::sync::Arc<[u8]>>) -> Result<Vec<u8>> {
        encode_event_with(event, dict, &mut self.0)
    }
}

/// [`encode_event`] compressing with `dict`, the dictionary of the event's
/// type, with `compressors` (the compressed body is made in its scratch
/// space). The record is written into one buffer of its final size.
pub(crate) fn encode_event_with(event: &StoredEvent, dict: Option<&std::sync::Arc<[u8]>>, compressors: &mut Compressors) -> Result<Vec<u8>> {
    let json = &event.body.json;
    let prepared = compressors.get(&event.resource, dict);
    let Compressors { table, body: compressed, .. } = compressors;
    prepared.compress(json, table, compressed);
    let codec = if dict.is_some() { BODY_LZ4_DICT } else { BODY_LZ4 };
    let compressed = (codec, compressed.len());
    let (mut codec, body) = match compressed {
        (codec, n) if n < json.len() => (codec, &compressors.body[..n]),
        _ => (BODY_RAW, &json[..]),
    };
    if event.body.row.is_some() {
        codec |= BODY_WITH_ROW;
    }
    let body_len = u32::try_from(json.len()).map_err(|_| Error::Corrupt { what: format!("event {}: body over 4 GiB", event.rv) })?;
    // Integers take at most 10 bytes, a string its length and at most 10.
    let strings = |pairs: &[(String, String)]| pairs.iter().map(|(k, v)| k.len() + v.len() + 20).sum::<usize>();
    let head_max = 161
        + event.resource.len()
        + event.key.namespace.len()
        + event.key.name.len()
        + event.key.cluster.len()
        + event.member_rv.len()
        + event.uid.len()
        + strings(&event.labels)
        + strings(&event.fields);
    let row_len = event.body.row.as_ref().map_or(0, |row| 12 + row.template.len());
    let mut out = Vec::with_capacity(head_max + row_len + body.len());
    out.push(RECORD_TAG);
    let mut w = Writer(&mut out);
    w.varint(event.rv);
    w.varint(event_type_index(event.event_type));
    w.bytes(event.resource.as_bytes());
    for part in [&event.key.namespace, &event.key.name, &event.key.cluster] {
        w.bytes(part.as_bytes());
    }
    w.varint(event.prev_rv);
    w.bytes(event.member_rv.as_bytes());
    w.bytes(event.uid.as_bytes());
    for pairs in [&event.labels, &event.fields] {
        w.pairs(pairs.len(), pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    w.varint(event.time_ms);
    for n in [event.body.name_end, event.body.rv_at, body_len] {
        w.varint(u64::from(n));
    }
    w.byte(codec);
    if let Some(row) = &event.body.row {
        let template_len = u32::try_from(row.template.len())
            .map_err(|_| Error::Corrupt { what: format!("event {}: Table row over 4 GiB", event.rv) })?;
        for n in [row.metadata_start, row.metadata_end, template_len] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&row.template);
    }
    out.extend_from_slice(body);
    Ok(out)
}

/// The index of an event type in a record head.
fn event_type_index(event_type: EventType) -> u64 {
    match event_type {
        EventType::Added => 0,
        EventType::Modified => 1,
        EventType::Deleted => 2,
    }
}

/// A record head's fields, borrowed, but its labels and fields (see [`read_head`]).
struct HeadParts<'a> {
    rv: u64,
    event_type: EventType,
    resource: &'a str,
    key: [&'a [u8]; 3],
    prev_rv: u64,
    member_rv: &'a [u8],
    uid: &'a [u8],
    time_ms: u64,
    name_end: u32,
    rv_at: u32,
    body_len: u32,
    body_codec: u8,
}

/// Reads the head at the start of `record`, of either layout (format 6,
/// or 5 and older), giving each label (`false`) and selectable field
/// (`true`) to `pair` as it is read; the head and the bytes it takes.
/// `None` is damage, as is a `None` from `pair`. Read by hand: a list
/// reads one head per object (bincode's generic reader was about a tenth
/// of a long list's CPU, 100k pods).
fn read_head<'a>(record: &'a [u8], mut pair: impl FnMut(bool, &'a [u8], &'a [u8]) -> Option<()>) -> Option<(HeadParts<'a>, usize)> {
    let mut r = match record.first() {
        Some(&RECORD_TAG) => {
            let mut r = Reader::new(record);
            r.byte()?;
            r
        }
        _ => Reader::old(record),
    };
    let rv = r.u64()?;
    let event_type = match r.varint(u64::from(u32::MAX))? {
        0 => EventType::Added,
        1 => EventType::Modified,
        2 => EventType::Deleted,
        _ => return None,
    };
    let resource = r.str()?;
    let key = [r.bytes()?, r.bytes()?, r.bytes()?];
    let prev_rv = r.u64()?;
    let member_rv = r.bytes()?;
    let uid = r.bytes()?;
    for field in [false, true] {
        // Each pair takes at least two bytes: the count is bounded by the record.
        for _ in 0..r.u64()? {
            pair(field, r.bytes()?, r.bytes()?)?;
        }
    }
    let time_ms = r.u64()?;
    let (name_end, rv_at, body_len) = (r.u32()?, r.u32()?, r.u32()?);
    let body_codec = r.byte()?;
    let head = HeadParts { rv, event_type, resource, key, prev_rv, member_rv, uid, time_ms, name_end, rv_at, body_len, body_codec };
    Some((head, r.position()))
}

/// Decodes the head of an event record; returns it and where the body starts.
pub(crate) fn decode_head(bytes: &[u8]) -> Result<(EventHead, usize)> {
    let (mut labels, mut fields) = (Vec::new(), Vec::new());
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).ok();
    let read = read_head(bytes, |field, k, v| {
        let pair = (text(k)?, text(v)?);
        if field { fields.push(pair) } else { labels.push(pair) }
        Some(())
    });
    let damaged = || Error::Corrupt { what: "event: damaged record head".to_string() };
    let (h, used) = read.ok_or_else(damaged)?;
    let [namespace, name, cluster] = h.key;
    let head = EventHead {
        rv: h.rv,
        event_type: h.event_type,
        resource: h.resource.to_string(),
        key: ObjectKey { namespace: text(namespace).ok_or_else(damaged)?, name: text(name).ok_or_else(damaged)?, cluster: text(cluster).ok_or_else(damaged)? },
        prev_rv: h.prev_rv,
        member_rv: text(h.member_rv).ok_or_else(damaged)?,
        uid: text(h.uid).ok_or_else(damaged)?,
        labels,
        fields,
        time_ms: h.time_ms,
        name_end: h.name_end,
        rv_at: h.rv_at,
        body_len: h.body_len,
        body_codec: h.body_codec,
    };
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    Ok((head, used))
}

/// Decodes one event record (the value of an `e` record) as the store
/// reads it, for a type without a dictionary; a damaged record is
/// [`Error::Corrupt`]. Public for the `store_envelope` fuzz target (`fuzz/`).
pub fn decode_event(bytes: &[u8]) -> Result<StoredEvent> {
    decode_event_with(bytes, &Dicts::new())
}

/// [`decode_event`] with `dicts`, the dictionaries of the store the record
/// comes from.
pub fn decode_event_with(bytes: &[u8], dicts: &Dicts) -> Result<StoredEvent> {
    let (head, used) = decode_head(bytes)?;
    let (row, body) = split_row(head.rv, head.body_codec, head.body_len, &bytes[used..])?;
    let json = decompress_body(head.rv, &head.resource, head.body_codec, head.body_len as usize, body, dicts)?;
    Ok(head.into_event(json, row))
}

/// The head of an event record as read for its body alone: what serving
/// the body needs, the rest passed over.
pub(crate) struct BodyHead<'a> {
    pub(crate) rv: u64,
    pub(crate) resource: &'a str,
    pub(crate) name_end: u32,
    pub(crate) rv_at: u32,
    pub(crate) body_len: u32,
    pub(crate) body_codec: u8,
}

impl<'a> BodyHead<'a> {
    /// Reads the head at the start of `record` (of either layout, see
    /// [`read_head`]) and the bytes it takes. Whatever [`decode_head`]
    /// refuses but text that is not UTF-8 is refused too.
    pub(crate) fn read(record: &'a [u8]) -> Result<(BodyHead<'a>, usize)> {
        let (h, used) = read_head(record, |_, _, _| Some(())).ok_or_else(|| Error::Corrupt { what: "event: damaged record head".to_string() })?;
        Ok((BodyHead { rv: h.rv, resource: h.resource, name_end: h.name_end, rv_at: h.rv_at, body_len: h.body_len, body_codec: h.body_codec }, used))
    }
}

/// Decodes the body of one event record (what a list or get serves): as
/// [`decode_event_with`], without building the rest of the event.
pub(crate) fn decode_body_with(bytes: &[u8], dicts: &Dicts) -> Result<ServedBody> {
    let (head, used) = BodyHead::read(bytes)?;
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    let (row, body) = split_row(head.rv, head.body_codec, head.body_len, &bytes[used..])?;
    let json = decompress_body(head.rv, head.resource, head.body_codec, head.body_len as usize, body, dicts)?;
    Ok(ServedBody { json, name_end: head.name_end, rv_at: head.rv_at, row })
}

/// The Table row of a record (when its encoding says it has one) and the
/// stored body after it.
pub(crate) fn split_row(rv: u64, codec: u8, body_len: u32, after_head: &[u8]) -> Result<(Option<TableRow>, &[u8])> {
    let (row, body) = row_section(rv, codec, body_len, after_head)?;
    let row = row.map(|(metadata_start, metadata_end, template)| TableRow { template: template.to_vec(), metadata_start, metadata_end });
    Ok((row, body))
}

/// A Table row's section borrowed ([`split_row`]): metadata start and end,
/// template; and the stored body after it.
#[allow(clippy::type_complexity)]
pub(crate) fn row_section(rv: u64, codec: u8, body_len: u32, after_head: &[u8]) -> Result<(Option<(u32, u32, &[u8])>, &[u8])> {
    if codec & BODY_WITH_ROW == 0 {
        return Ok((None, after_head));
    }
    let damaged = || Error::Corrupt { what: format!("event {rv}: Table row out of bounds") };
    let word = |at: usize| -> Result<u32> {
        let bytes = after_head.get(at..at + 4).ok_or_else(damaged)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("four bytes")))
    };
    let (metadata_start, metadata_end, template_len) = (word(0)?, word(4)?, word(8)? as usize);
    if metadata_start > metadata_end || metadata_end > body_len {
        return Err(damaged());
    }
    let template = after_head.get(12..12 + template_len).ok_or_else(damaged)?;
    Ok((Some((metadata_start, metadata_end, template)), &after_head[12 + template_len..]))
}

/// Checks a record head's body length, splice points and encoding.
pub(crate) fn check_body(rv: u64, body_len: u32, name_end: u32, rv_at: u32, codec: u8) -> Result<()> {
    let len = body_len as usize;
    if len > MAX_RECORD_BYTES || name_end as usize > len || rv_at as usize > len {
        return Err(Error::Corrupt { what: format!("event {rv}: body length or splice points out of bounds") });
    }
    if ![BODY_RAW, BODY_LZ4, BODY_LZ4_DICT].contains(&(codec & !BODY_WITH_ROW)) {
        return Err(Error::Corrupt { what: format!("event {rv}: unknown body encoding {codec}") });
    }
    Ok(())
}

/// The JSON of a record's body as stored (`body`, encoded with `codec`).
pub(crate) fn decompress_body(rv: u64, resource: &str, codec: u8, len: usize, body: &[u8], dicts: &Dicts) -> Result<Vec<u8>> {
    let undecodable = || Error::Corrupt { what: format!("event {rv}: compressed body does not decode") };
    Ok(match codec & !BODY_WITH_ROW {
        BODY_LZ4 => lz4_flex::block::decompress(body, len).ok().filter(|json| json.len() == len).ok_or_else(undecodable)?,
        BODY_LZ4_DICT => {
            let dict = dicts.get(resource).ok_or_else(|| Error::Corrupt {
                what: format!("event {rv}: no compression dictionary for {resource}"),
            })?;
            lz4_flex::block::decompress_with_dict(body, len, dict).ok().filter(|json| json.len() == len).ok_or_else(undecodable)?
        }
        _ if body.len() == len => body.to_vec(),
        _ => return Err(Error::Corrupt { what: format!("event {rv}: body is {} bytes, the head says {len}", body.len()) }),
    })
}

/// Decodes an event record without its body (an empty one): what
/// recovery, retention and compaction need.
pub(crate) fn decode_event_head(bytes: &[u8]) -> Result<StoredEvent> {
    Ok(decode_head(bytes)?.0.into_event(Vec::new(), None))
}

/// Dictionaries for the types in `events` that have none in `dicts` yet,
/// each made of the first bodies of that type in `events` when they are
/// large enough.
pub fn new_dictionaries(dicts: &Dicts, events: &[StoredEvent]) -> Vec<(String, std::sync::Arc<[u8]>)> {
    let mut building: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    for event in events {
        if dicts.contains_key(&event.resource) {
            continue;
        }
        let dict = building.entry(&event.resource).or_default();
        let room = DICT_MAX_BYTES - dict.len();
        dict.extend_from_slice(&event.body.json[..event.body.json.len().min(room)]);
    }
    building
        .into_iter()
        .filter(|(_, dict)| dict.len() >= DICT_MIN_BYTES)
        .map(|(resource, dict)| (resource.to_string(), dict.into()))
        .collect()
}
