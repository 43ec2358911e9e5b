//! The record codec: an event record is its head (every field of
//! [`StoredEvent`] but the body), the object's Table row if any, then the
//! body's JSON, LZ4-compressed (with its resource type's dictionary once
//! there is one) when that makes it smaller. Encoding, decoding whole
//! records, heads alone (read by hand for serving) and bodies, and the
//! making of the compression dictionaries.

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
pub(crate) type Dicts = std::collections::HashMap<String, std::sync::Arc<[u8]>>;

/// Largest record the store decodes: no length read from a damaged record
/// can make decoding allocate more than this.
pub(crate) const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

pub(crate) fn config() -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint, bincode::config::Limit<MAX_RECORD_BYTES>> {
    bincode::config::standard().with_limit::<MAX_RECORD_BYTES>()
}

/// The head of an event record as written: every field of [`StoredEvent`]
/// but the body's bytes, borrowed.
#[derive(serde::Serialize)]
pub(crate) struct EventHeadRef<'a> {
    pub(crate) rv: u64,
    pub(crate) event_type: EventType,
    pub(crate) resource: &'a str,
    pub(crate) key: &'a ObjectKey,
    pub(crate) prev_rv: u64,
    pub(crate) member_rv: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) labels: &'a [(String, String)],
    pub(crate) fields: &'a [(String, String)],
    pub(crate) time_ms: u64,
    pub(crate) name_end: u32,
    pub(crate) rv_at: u32,
    pub(crate) body_len: u32,
    pub(crate) body_codec: u8,
}

/// The head of an event record as read (same layout as [`EventHeadRef`]).
#[derive(serde::Deserialize)]
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
    let head = EventHeadRef {
        rv: event.rv,
        event_type: event.event_type,
        resource: &event.resource,
        key: &event.key,
        prev_rv: event.prev_rv,
        member_rv: &event.member_rv,
        uid: &event.uid,
        labels: &event.labels,
        fields: &event.fields,
        time_ms: event.time_ms,
        name_end: event.body.name_end,
        rv_at: event.body.rv_at,
        body_len: u32::try_from(json.len()).map_err(|_| Error::Corrupt { what: format!("event {}: body over 4 GiB", event.rv) })?,
        body_codec: codec,
    };
    // Integers take at most 10 bytes, a string its length and at most 10.
    let strings = |pairs: &[(String, String)]| pairs.iter().map(|(k, v)| k.len() + v.len() + 20).sum::<usize>();
    let head_max = 160
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
    bincode::serde::encode_into_std_write(&head, &mut out, config())?;
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

/// Decodes the head of an event record; returns it and where the body starts.
pub(crate) fn decode_head(bytes: &[u8]) -> Result<(EventHead, usize)> {
    let (head, used): (EventHead, usize) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| Error::Corrupt { what: format!("event: {e}") })?;
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    Ok((head, used))
}

/// Decodes one event record (the value of an `e` record) as the store
/// reads it, for a type without a dictionary; a damaged record is
/// [`Error::Corrupt`]. Public for the `store_envelope` fuzz target (`fuzz/`).
pub fn decode_event(bytes: &[u8]) -> Result<StoredEvent> {
    decode_event_with(bytes, &Dicts::new())
}

/// [`decode_event`] with the store's dictionaries.
pub(crate) fn decode_event_with(bytes: &[u8], dicts: &Dicts) -> Result<StoredEvent> {
    let (head, used) = decode_head(bytes)?;
    let (row, body) = split_row(head.rv, head.body_codec, head.body_len, &bytes[used..])?;
    let json = decompress_body(head.rv, &head.resource, head.body_codec, head.body_len as usize, body, dicts)?;
    Ok(head.into_event(json, row))
}

/// The head of an event record as read for its body alone (same layout
/// as [`EventHeadRef`]): what serving the body needs, the rest passed over.
pub(crate) struct BodyHead<'a> {
    pub(crate) rv: u64,
    pub(crate) resource: &'a str,
    pub(crate) name_end: u32,
    pub(crate) rv_at: u32,
    pub(crate) body_len: u32,
    pub(crate) body_codec: u8,
}

impl<'a> BodyHead<'a> {
    /// Reads the head at the start of `record` and the bytes it takes, as
    /// bincode's standard configuration encodes [`EventHeadRef`] (varint
    /// integers: one byte below 251, else a marker 251/252/253 and 2/4/8
    /// little-endian bytes; lengths before strings and sequences; a `u8`
    /// as itself; an enum as its variant's index). Read by hand rather than
    /// through serde: a list reads one head per object, and bincode's
    /// generic reader was about a tenth of a long list's CPU (100k pods).
    /// Whatever bincode would refuse here is refused too.
    pub(crate) fn read(record: &'a [u8]) -> Result<(BodyHead<'a>, usize)> {
        let mut r = HeadReader { bytes: record, at: 0 };
        let head = r.body_head().ok_or_else(|| Error::Corrupt { what: "event: damaged record head".to_string() })?;
        Ok((head, r.at))
    }
}

/// A cursor over a record head for [`BodyHead::read`]; `None` is damage.
pub(crate) struct HeadReader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> HeadReader<'a> {
    fn body_head(&mut self) -> Option<BodyHead<'a>> {
        let rv = self.varint(u64::MAX)?;
        // EventType: Added, Modified or Deleted.
        if self.varint(u64::from(u32::MAX))? > 2 {
            return None;
        }
        let resource = std::str::from_utf8(self.bytes()?).ok()?;
        for _ in 0..3 {
            self.bytes()?; // key: namespace, name, cluster
        }
        self.varint(u64::MAX)?; // prev_rv
        self.bytes()?; // member_rv
        self.bytes()?; // uid
        for _ in 0..2 {
            // labels, then fields: pairs of strings
            let pairs = self.varint(u64::MAX)?;
            for _ in 0..pairs {
                self.bytes()?;
                self.bytes()?;
            }
        }
        self.varint(u64::MAX)?; // time_ms
        let name_end = self.u32()?;
        let rv_at = self.u32()?;
        let body_len = self.u32()?;
        let body_codec = *self.take(1)?.first()?;
        Some(BodyHead { rv, resource, name_end, rv_at, body_len, body_codec })
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    /// A varint of a type whose largest value is `max` (a `u32` refuses
    /// the 8-byte marker, as bincode does).
    fn varint(&mut self, max: u64) -> Option<u64> {
        let first = *self.take(1)?.first()?;
        let value = match first {
            0..=250 => u64::from(first),
            251 => u64::from(u16::from_le_bytes(self.take(2)?.try_into().ok()?)),
            252 => u64::from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
            253 if max > u64::from(u32::MAX) => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
            _ => return None,
        };
        (value <= max).then_some(value)
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint(u64::from(u32::MAX))?).ok()
    }

    /// A length-prefixed string or byte string (a length past the record's
    /// end or [`MAX_RECORD_BYTES`] is damage).
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint(u64::MAX)?).ok()?;
        if len > MAX_RECORD_BYTES {
            return None;
        }
        self.take(len)
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

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// Dictionaries for the types in `events` that have none yet, each made of
/// the first bodies of that type in `events` when they are large enough.
pub(crate) fn new_dictionaries(dicts: &Dicts, events: &[StoredEvent]) -> Vec<(String, std::sync::Arc<[u8]>)> {
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
