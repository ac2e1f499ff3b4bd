//! What a search of a file left out ([`Refused`]), and the questions the checks after parsing
//! ask of it: was this key refused, or something under this entry, and what was written there.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// One step of the path from a file's root to an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// An item left out of a file: where it was, what held it, and what it was.
#[derive(Debug, Clone)]
pub(super) struct Removal {
    pub(super) path: Vec<Segment>,
    /// The spans of the tables and arrays that held it, the root's first.
    pub(super) holders: Vec<Range<usize>>,
    pub(super) value: Option<toml::Value>,
}

/// What a file had that serde refused (each reported) or that needed what it refused (not
/// reported): left out, so that the rest could be read.
#[derive(Debug, Clone, Default)]
pub struct Refused {
    removals: Vec<Removal>,
    /// The items left out, by where they start ([`Item`]).
    pub(super) items: HashSet<Item>,
    /// The removals under each table or array (by its span), so that the questions about
    /// one entry of twenty thousand do not go through every removal.
    under: HashMap<(usize, usize), Vec<usize>>,
}

/// An item of a document, by where it starts: a key of a table (its key's start) or an
/// element of an array (its value's start). Spans do not change while a search leaves items
/// out, so they name items across the copies it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Item {
    Key(usize),
    Element(usize),
}

impl Refused {
    /// Something at `path`, above it or below it was left out: `["ensemble", "component"]`
    /// is touched when the component was refused, or the whole `[ensemble]`.
    pub fn touches(&self, path: &[&str]) -> bool {
        self.removals.iter().any(|removal| {
            (removal.path.iter().zip(path)).all(|(segment, key)| match segment {
                Segment::Key(name) => name == key,
                Segment::Index(_) => false,
            })
        })
    }

    /// The keys directly under the table or array element written at `holder` (its span, as
    /// a `Spanned` value of it has it) under which something was left out: `invoker` when a
    /// key of an entry's inline `invoker` table was refused. (The element of an array of
    /// tables has its array's span, its first header's: the innermost holder is meant.)
    pub fn keys_under(&self, holder: &Range<usize>) -> Vec<&str> {
        (self.removals_under(holder))
            .filter_map(|(removal, depth)| match removal.path.get(depth) {
                Some(Segment::Key(key)) => Some(key.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The removals under `holder`, each with the depth of its path just under it.
    fn removals_under(&self, holder: &Range<usize>) -> impl Iterator<Item = (&Removal, usize)> {
        let holder = holder.clone();
        let indices = self.under.get(&(holder.start, holder.end));
        (indices.into_iter().flatten()).filter_map(move |&index| {
            let removal = &self.removals[index];
            let depth = removal.holders.iter().rposition(|h| *h == holder)?;
            Some((removal, depth))
        })
    }

    /// What was left out at `path` or below it (a whole list, or one of its elements, or a
    /// key of one), each with its path below `path`, as it was written.
    pub fn values_under<'a>(
        &'a self,
        path: &'a [&'a str],
    ) -> impl Iterator<Item = (&'a [Segment], &'a toml::Value)> + 'a {
        self.removals.iter().filter_map(move |removal| {
            let at = removal.path.get(..path.len())?;
            let same = (at.iter().zip(path))
                .all(|(segment, key)| matches!(segment, Segment::Key(name) if name == key));
            same.then_some(())?;
            Some((&removal.path[path.len()..], removal.value.as_ref()?))
        })
    }

    /// Something at `path` below the table or array element written at `holder` (or above
    /// `path`, up to `holder`) was left out.
    pub fn touches_under(&self, holder: &Range<usize>, path: &[&str]) -> bool {
        self.removals_under(holder).any(|(removal, depth)| {
            (removal.path[depth..].iter().zip(path))
                .all(|(segment, key)| matches!(segment, Segment::Key(name) if name == key))
        })
    }

    pub(super) fn leave_out(&mut self, item: Item, removal: Removal) {
        if self.items.insert(item) {
            for holder in &removal.holders {
                let at = self.under.entry((holder.start, holder.end)).or_default();
                // An array of tables and its first element have one span: one entry.
                if at.last() != Some(&self.removals.len()) {
                    at.push(self.removals.len());
                }
            }
            self.removals.push(removal);
        }
    }

    /// A key `key` of the table written at `table` was left out.
    pub(super) fn left_out_key_of(&self, table: &Range<usize>, key: &str) -> bool {
        self.removals_under(table).any(|(removal, depth)| {
            depth + 1 == removal.path.len()
                && matches!(removal.path.last(), Some(Segment::Key(k)) if k == key)
        })
    }
}
