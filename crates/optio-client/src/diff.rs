//! What changed in a volume between two points, and what each snapshot holds alone
//! (`optio volume diff | export-diff | du`; `docs/volumes.md`, "Snapshots and clones").
//!
//! A *point* is a snapshot (its mark) or the volume's head. The content a point sees of a
//! data object is a version — the head's or a clone's — or nothing (zeros): for the head, the
//! head as listed; for a snapshot, the newest content below its mark
//! ([`snapshot::visible_version`]: from the listing when the object has no clone, else asked
//! of the servers, which also know tombstones). Two points differ on an object exactly when
//! they see different versions (the same version is the same content on every replica).
//!
//! Granularity is the data object: an object written anywhere between the two points is
//! reported whole (as RBD's `diff --whole-object` does), the finest the stored form tells
//! without reading data. A clone's objects it never wrote are seen through its parent
//! snapshot (and the parent's parents): the same parent content at both points is no change.
//!
//! Space (`du`) is counted per stored content, whole objects: a point *references* every
//! content it sees, and *uses* those no other point sees; contents no point sees are clones
//! waiting for a trim.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use optio_proto::ObjectVersion;
use serde::Serialize;

use crate::Client;
use crate::snapshot::{self, Stored};
use crate::volume::{
    Ancestor, DATA_PREFIX, Snapshot, VolumeError, VolumeHeader, ancestors, data_key, find,
    find_header,
};

/// Objects whose content at the points is worked out at once (server reads in flight).
const LOOKUPS_IN_FLIGHT: usize = 16;

/// What a point of a volume sees of one data object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing: zeros.
    Nothing,
    /// The volume's own content at this version.
    Own(ObjectVersion),
    /// An ancestor's (nearest-first position) content at this version.
    Inherited(usize, ObjectVersion),
}

/// One data object that differs between the two points of a [`Diff`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChangedObject {
    /// Its index.
    pub index: u64,
    /// Its first byte in the volume.
    pub offset: u64,
    /// Its bytes within the end point's size.
    pub length: u64,
    /// Whether the end point has data there (else it reads as zeros).
    pub data: bool,
}

/// A run of bytes that changed, as `optio volume diff` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Extent {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// `"data"`, or `"zero"` where the end point reads zeros (a hole).
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// The objects that differ between two points of a volume.
#[derive(Clone, Debug)]
pub struct Diff {
    /// The volume's header (as read when the diff was made).
    pub header: VolumeHeader,
    /// The start point (none: an empty volume — every allocated object is listed).
    pub from_snap: Option<Snapshot>,
    /// The end point (none: the head).
    pub to_snap: Option<Snapshot>,
    /// The volume's size at the end point.
    pub size_bytes: u64,
    /// Every object that differs, by index.
    pub objects: Vec<ChangedObject>,
}

impl Diff {
    /// The changed objects as extents, adjacent ones of the same type merged.
    pub fn extents(&self) -> Vec<Extent> {
        let mut out: Vec<Extent> = Vec::new();
        for object in &self.objects {
            let kind = if object.data { "data" } else { "zero" };
            match out.last_mut() {
                Some(last) if last.kind == kind && last.offset + last.length == object.offset => {
                    last.length += object.length;
                }
                _ => out.push(Extent { offset: object.offset, length: object.length, kind }),
            }
        }
        out
    }
}

/// The marked snapshot `name` of `header`.
fn marked(header: &VolumeHeader, name: &str) -> Result<(Snapshot, ObjectVersion), VolumeError> {
    let snapshot = find(header, name)?.clone();
    let Some(mark) = snapshot.mark else {
        return Err(VolumeError::Snapshot(format!(
            "snapshot '{}@{name}' is being taken and cannot be read yet: try again in a moment",
            header.name
        )));
    };
    Ok((snapshot, ObjectVersion(mark)))
}

/// The stored objects of a volume and of each of its ancestors (nearest first).
struct Holdings {
    header: VolumeHeader,
    own: BTreeMap<u64, Stored>,
    ancestors: Vec<(Ancestor, BTreeMap<u64, Stored>)>,
}

impl Holdings {
    async fn read(client: &Client, header: VolumeHeader) -> Result<Holdings, VolumeError> {
        let own = snapshot::stored_objects(client, &header.pool, &header.data_prefix()).await?;
        let mut out = Vec::new();
        for ancestor in ancestors(client, &header).await? {
            let prefix = format!("{DATA_PREFIX}{}.", ancestor.id);
            let stored = snapshot::stored_objects(client, &ancestor.pool, &prefix).await?;
            out.push((ancestor, stored));
        }
        Ok(Holdings { header, own, ancestors: out })
    }

    /// Every object index any of them stores.
    fn indices(&self) -> BTreeSet<u64> {
        let mut out: BTreeSet<u64> = self.own.keys().copied().collect();
        for (ancestor, stored) in &self.ancestors {
            let within = ancestor.overlap.div_ceil(self.header.object_size);
            out.extend(stored.keys().copied().filter(|index| *index < within));
        }
        out
    }

    /// What the point `mark` (none: the head) of a volume of `size_bytes` sees of object
    /// `index`.
    async fn seen(
        &self,
        client: &Client,
        index: u64,
        mark: Option<ObjectVersion>,
        size_bytes: u64,
        own_only: bool,
    ) -> Result<Seen, VolumeError> {
        let offset = index * self.header.object_size;
        if offset >= size_bytes {
            return Ok(Seen::Nothing);
        }
        if let Some(stored) = self.own.get(&index) {
            let key = self.header.data_key(index);
            let pool = &self.header.pool;
            if let Some(v) = snapshot::visible_version(client, pool, &key, stored, mark).await? {
                return Ok(Seen::Own(v));
            }
        }
        if own_only {
            return Ok(Seen::Nothing);
        }
        for (depth, (ancestor, stored)) in self.ancestors.iter().enumerate() {
            if offset >= ancestor.overlap {
                break;
            }
            let Some(stored) = stored.get(&index) else { continue };
            let key = data_key(&ancestor.id, index);
            let (pool, mark) = (&ancestor.pool, Some(ancestor.mark));
            if let Some(v) = snapshot::visible_version(client, pool, &key, stored, mark).await? {
                return Ok(Seen::Inherited(depth, v));
            }
        }
        Ok(Seen::Nothing)
    }
}

/// The data objects that differ between snapshot `from_snap` (none: an empty volume) and
/// snapshot `to_snap` (none: the head) of volume `name`.
pub async fn diff(
    client: &Client,
    name: &str,
    to_snap: Option<&str>,
    from_snap: Option<&str>,
) -> Result<Diff, VolumeError> {
    let (header, _) = find_header(client, name).await?;
    if header.removing {
        return Err(VolumeError::NotFound(name.to_string()));
    }
    let to = to_snap.map(|s| marked(&header, s)).transpose()?;
    let from = from_snap.map(|s| marked(&header, s)).transpose()?;
    let size_bytes = to.as_ref().map_or(header.size, |(s, _)| s.size);
    let holdings = Holdings::read(client, header).await?;
    let object_size = holdings.header.object_size;
    let indices: Vec<u64> =
        holdings.indices().into_iter().filter(|i| i * object_size < size_bytes).collect();
    let (to_mark, from_point) = (to.as_ref().map(|t| t.1), from.as_ref().map(|f| (f.1, f.0.size)));
    use futures_util::StreamExt;
    let holdings = &holdings;
    let looked: Vec<Result<Option<ChangedObject>, VolumeError>> =
        futures_util::stream::iter(indices)
            .map(|index| async move {
                let now = holdings.seen(client, index, to_mark, size_bytes, false).await?;
                let then = match from_point {
                    Some((mark, size)) => {
                        holdings.seen(client, index, Some(mark), size, false).await?
                    }
                    None => Seen::Nothing,
                };
                if now == then {
                    return Ok(None);
                }
                let offset = index * object_size;
                Ok(Some(ChangedObject {
                    index,
                    offset,
                    length: object_size.min(size_bytes - offset),
                    data: now != Seen::Nothing,
                }))
            })
            .buffered(LOOKUPS_IN_FLIGHT)
            .collect()
            .await;
    let mut objects = Vec::new();
    for result in looked {
        objects.extend(result?);
    }
    Ok(Diff {
        header: holdings.header.clone(),
        from_snap: from.map(|f| f.0),
        to_snap: to.map(|t| t.0),
        size_bytes,
        objects,
    })
}

/// One row of [`Space`]: a snapshot, or the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpaceRow {
    /// `VOL@SNAP`, or `VOL` for the head.
    pub name: String,
    /// The snapshot's name (none: the head).
    pub snapshot: Option<String>,
    /// The snapshot's id (none: the head).
    pub id: Option<u64>,
    /// Its size.
    pub provisioned_bytes: u64,
    /// Bytes of the stored contents only it sees (what removing it would free, for a
    /// snapshot).
    pub used_bytes: u64,
    /// Bytes of every stored content it sees (shared with other points or not).
    pub referenced_bytes: u64,
    /// Data objects it sees.
    pub objects: u64,
}

/// What a volume's snapshots and head hold (`optio volume du`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Space {
    /// The volume.
    pub volume: String,
    /// Bytes per data object (the accounting's granularity).
    pub object_size: u64,
    /// Snapshots oldest first, then the head.
    pub rows: Vec<SpaceRow>,
    /// The head's size.
    pub provisioned_bytes: u64,
    /// Bytes of every content the volume stores (heads and clones, before replication).
    pub stored_bytes: u64,
    /// Of those, bytes more than one point sees.
    pub shared_bytes: u64,
    /// Of those, bytes no point sees (clones a trim will remove).
    pub unreferenced_bytes: u64,
}

/// What each snapshot of volume `name`, and its head, holds (see the module). A clone's
/// objects still read from its parent are the parent's, counted there.
pub async fn du(client: &Client, name: &str) -> Result<Space, VolumeError> {
    let (header, _) = find_header(client, name).await?;
    if header.removing {
        return Err(VolumeError::NotFound(name.to_string()));
    }
    let mut points: Vec<(SpaceRow, Option<ObjectVersion>)> = Vec::new();
    for snapshot in &header.snapshots {
        let (snapshot, mark) = marked(&header, &snapshot.name)?;
        let row = SpaceRow {
            name: format!("{name}@{}", snapshot.name),
            snapshot: Some(snapshot.name.clone()),
            id: Some(snapshot.id),
            provisioned_bytes: snapshot.size,
            used_bytes: 0,
            referenced_bytes: 0,
            objects: 0,
        };
        points.push((row, Some(mark)));
    }
    let head = SpaceRow {
        name: name.to_string(),
        snapshot: None,
        id: None,
        provisioned_bytes: header.size,
        used_bytes: 0,
        referenced_bytes: 0,
        objects: 0,
    };
    points.push((head, None));
    let holdings = Holdings::read(client, header.clone()).await?;
    let mut space = Space {
        volume: name.to_string(),
        object_size: header.object_size,
        rows: Vec::new(),
        provisioned_bytes: header.size,
        stored_bytes: 0,
        shared_bytes: 0,
        unreferenced_bytes: 0,
    };
    use futures_util::StreamExt;
    let (holdings, points_seen) = (&holdings, &points);
    let looked: Vec<Result<(u64, Vec<Seen>), VolumeError>> =
        futures_util::stream::iter(holdings.own.keys().copied())
            .map(|index| async move {
                let mut seen = Vec::with_capacity(points_seen.len());
                for (row, mark) in points_seen {
                    let size = row.provisioned_bytes;
                    seen.push(holdings.seen(client, index, *mark, size, true).await?);
                }
                Ok((index, seen))
            })
            .buffered(LOOKUPS_IN_FLIGHT)
            .collect()
            .await;
    for result in looked {
        let (index, seen) = result?;
        let stored = &holdings.own[&index];
        // Each stored content of this object (version → bytes), and which points see it.
        let mut contents: HashMap<ObjectVersion, (u64, Vec<usize>)> = HashMap::new();
        for (version, bytes) in stored.head.iter().chain(&stored.clones) {
            contents.entry(*version).or_insert((*bytes, Vec::new()));
        }
        for (i, seen) in seen.into_iter().enumerate() {
            if let Seen::Own(version) = seen {
                let entry = contents.entry(version).or_insert((header.object_size, Vec::new()));
                entry.1.push(i);
            }
        }
        for (bytes, seers) in contents.values() {
            space.stored_bytes += bytes;
            match seers.as_slice() {
                [] => space.unreferenced_bytes += bytes,
                [only] => points[*only].0.used_bytes += bytes,
                _ => space.shared_bytes += bytes,
            }
            for &i in seers {
                points[i].0.referenced_bytes += bytes;
                points[i].0.objects += 1;
            }
        }
    }
    space.rows = points.into_iter().map(|(row, _)| row).collect();
    Ok(space)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::visible_from_listing;

    #[test]
    fn the_listing_tells_what_a_point_sees_only_without_clones() {
        let v = ObjectVersion;
        let head = Stored { head: Some((v(30), 4096)), clones: vec![], seed: None };
        assert_eq!(visible_from_listing(&head, None), Some(Some(v(30))), "the head sees itself");
        assert_eq!(visible_from_listing(&head, Some(v(31))), Some(Some(v(30))));
        assert_eq!(visible_from_listing(&head, Some(v(30))), Some(None), "written at the mark");
        assert_eq!(visible_from_listing(&head, Some(v(10))), Some(None), "written after");
        let gone = Stored::default();
        assert_eq!(visible_from_listing(&gone, None), Some(None));
        assert_eq!(visible_from_listing(&gone, Some(v(10))), Some(None));
        // With a clone the servers are asked: a tombstone may stand between.
        let cloned = Stored { head: Some((v(30), 4096)), clones: vec![(v(10), 4096)], seed: None };
        assert_eq!(visible_from_listing(&cloned, None), Some(Some(v(30))));
        assert_eq!(visible_from_listing(&cloned, Some(v(20))), None);
    }

    fn diff_of(objects: &[(u64, bool)], object_size: u64) -> Vec<Extent> {
        let header = VolumeHeader::decode(
            "v",
            br#"{"format":1,"name":"v","id":"00","pool":"data","size":1048576,"object_size":4096,"features":[],"created_unix_s":0,"lock":null}"#,
        )
        .unwrap();
        let objects = objects
            .iter()
            .map(|&(index, data)| ChangedObject {
                index,
                offset: index * object_size,
                length: object_size,
                data,
            })
            .collect();
        Diff { header, from_snap: None, to_snap: None, size_bytes: 1 << 20, objects }.extents()
    }

    #[test]
    fn adjacent_objects_of_one_type_make_one_extent() {
        let extents = diff_of(&[(0, true), (1, true), (2, false), (4, false), (5, true)], 4096);
        let got: Vec<(u64, u64, &str)> =
            extents.iter().map(|e| (e.offset, e.length, e.kind)).collect();
        assert_eq!(
            got,
            [(0, 8192, "data"), (8192, 4096, "zero"), (16384, 4096, "zero"), (20480, 4096, "data")]
        );
    }
}
