//! recover: every value serde refuses in a file, not the first only. serde stops at the first
//! refusal; here the refused item (a key with its value, or an element of an array) is left
//! out of the parsed document and what remains is deserialized again, until it deserializes.
//! A "missing field" that names a key left out is a consequence, not reported, and the table
//! that needed the key is left out in turn. What was left out is kept ([`Refused`]) so that
//! the checks after parsing can pass over what depends on it.
//!
//! Bounded: the arrays that hold most of a large file (twenty thousand `[[invokers]]`) are
//! searched a window of elements at a time, from the element of the last error on (those
//! before it passed), so that one more error costs the deserializing of a few elements and
//! not of the whole file; and the whole search does at most [`WORK_FACTOR`] times the work of
//! deserializing the file once (plus [`WORK_BASE`]) and finds at most [`MAX_FOUND`] errors,
//! then stops and says so.

mod refused;

pub use refused::{Refused, Segment};

use refused::{Item, Removal};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::ops::Range;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue, Deserializer, ValueDeserializer};

/// The most elements of a large array deserialized at once while its errors are searched
/// for. A window starts at one element after an error (errors come in bunches) and doubles
/// while it passes.
const WINDOW: usize = 64;
/// The most errors looked for in one file: ten times those reported
/// ([`crate::MAX_ERRORS_PER_FILE`]), so that the first in file order are among them.
pub(crate) const MAX_FOUND: usize = 10 * crate::MAX_ERRORS_PER_FILE;
/// The search clones at most this many times the values of the file...
pub(crate) const WORK_FACTOR: usize = 16;
/// ... plus this many (so that a small file with many errors is searched to its end).
pub(crate) const WORK_BASE: usize = 1 << 16;

/// What a search found: the value (when what remained deserialized), every refusal (span
/// and serde's message, in the order found), what was left out, and whether the search ran
/// to its end.
pub(crate) struct Found<T> {
    pub value: Option<T>,
    pub errors: Vec<(Option<Range<usize>>, String)>,
    pub refused: Refused,
    pub complete: bool,
}

/// Which part of the document a search step deserializes: the large arrays are left empty,
/// or one of them shows a window of its elements (from, how many), or everything shows.
#[derive(Clone, Copy)]
enum View {
    Skeleton,
    Window(Item, usize, usize),
    Whole,
}

/// A search of one document.
struct Search<'d, 'i> {
    document: &'d Spanned<DeTable<'i>>,
    /// The arrays searched a window at a time: by the key that holds them, with its path,
    /// and their lengths.
    large: Vec<(Item, Vec<Segment>, usize)>,
    refused: Refused,
    /// Elements left out for one try only, while the one serde refused is looked for
    /// ([`Search::narrow`]).
    trying_without: HashSet<Item>,
    errors: Vec<(Option<Range<usize>>, String)>,
    /// Values cloned so far, and the most the search may clone.
    work: usize,
    budget: usize,
}

/// Deserializes `document` (parsed from `text`) as `T`, leaving out each item serde refuses
/// and trying again. A file without error is deserialized once, as toml would.
pub(crate) fn deserialize<T: DeserializeOwned>(
    text: &str,
    document: Spanned<DeTable<'_>>,
) -> Found<T> {
    let first = match T::deserialize(Deserializer::from(document)) {
        Ok(value) => {
            return Found {
                value: Some(value),
                errors: Vec::new(),
                refused: Refused::default(),
                complete: true,
            };
        }
        Err(first) => first,
    };
    // Deserializing used the document up: the search reads the text again (it parsed).
    match DeTable::parse(text) {
        Ok(document) => search(document),
        Err(_) => Found {
            value: None,
            errors: vec![(first.span(), first.message().trim_end().to_string())],
            refused: Refused::default(),
            complete: true,
        },
    }
}

/// The search of a document that does not deserialize.
fn search<T: DeserializeOwned>(document: Spanned<DeTable<'_>>) -> Found<T> {
    let mut large = Vec::new();
    let values = survey(document.get_ref(), &mut Vec::new(), &mut large);
    let mut search = Search {
        document: &document,
        large,
        refused: Refused::default(),
        trying_without: HashSet::new(),
        errors: Vec::new(),
        work: 0,
        budget: values.saturating_mul(WORK_FACTOR).saturating_add(WORK_BASE),
    };
    let (mut value, mut complete) = (None, true);
    let end = |settled: Settled<T>, value: &mut Option<T>, complete: &mut bool| match settled {
        Settled::Clean(found) => {
            *value = found;
            false
        }
        Settled::Stuck => true,
        Settled::OutOfWork => {
            *complete = false;
            true
        }
    };
    let mut stopped = end(search.settle(View::Skeleton), &mut value, &mut complete);
    for (array, path, length) in search.large.clone() {
        let (mut from, mut size) = (0, WINDOW);
        while from < length && !stopped {
            match search.step::<T>(View::Window(array, from, size)) {
                Step::Clean(_) => (from, size) = (from + size, (2 * size).min(WINDOW)),
                Step::Refused(at) => {
                    // The elements before the refused one passed.
                    let index = (at.get(path.len()))
                        .filter(|_| at.starts_with(&path))
                        .and_then(|segment| match segment {
                            Segment::Index(index) => Some(*index),
                            Segment::Key(_) => None,
                        });
                    if let Some(index) = index {
                        (from, size) = (index.max(from), 1);
                    }
                }
                Step::Stop(settled) => stopped = end(settled, &mut value, &mut complete),
            }
        }
    }
    if !stopped {
        end(search.settle(View::Whole), &mut value, &mut complete);
    }
    if !complete {
        value = None;
    }
    Found {
        value,
        errors: search.errors,
        refused: search.refused,
        complete,
    }
}

/// What one step of a search came to.
enum Step<T> {
    /// The view deserializes (the value, for the whole document).
    Clean(Option<T>),
    /// An item was refused and left out: its path.
    Refused(Vec<Segment>),
    /// The search cannot go on.
    Stop(Settled<T>),
}

/// How a view of the document ended up.
enum Settled<T> {
    /// What shows deserializes (the value, for the whole document).
    Clean(Option<T>),
    /// An error left nothing to leave out (the root itself): nothing more can be read.
    Stuck,
    /// The search used its budget.
    OutOfWork,
}

/// An item found in the document: what it is, its path, and the spans of what holds it.
type Target = (Item, Vec<Segment>, Vec<Range<usize>>);

impl<'d, 'i> Search<'d, 'i> {
    /// Deserializes `view` of the document until it deserializes, leaving out what serde
    /// refuses.
    fn settle<T: DeserializeOwned>(&mut self, view: View) -> Settled<T> {
        loop {
            match self.step(view) {
                Step::Clean(value) => return Settled::Clean(value),
                Step::Refused(_) => {}
                Step::Stop(settled) => return settled,
            }
        }
    }

    /// Deserializes `view` once; what serde refuses is recorded and left out.
    fn step<T: DeserializeOwned>(&mut self, view: View) -> Step<T> {
        if self.work > self.budget || self.errors.len() >= MAX_FOUND {
            return Step::Stop(Settled::OutOfWork);
        }
        let error = match self.attempt::<T>(view) {
            Ok(value) => return Step::Clean(matches!(view, View::Whole).then_some(value)),
            Err(error) => error,
        };
        let message = error.message().trim_end().to_string();
        let Some(span) = error.span() else {
            self.errors.push((None, message));
            return Step::Stop(Settled::Stuck);
        };
        let missing = (message.strip_prefix("missing field `"))
            .and_then(|rest| rest.strip_suffix('`'))
            .map(str::to_string);
        let target = match &missing {
            Some(key) => {
                if !self.refused.left_out_key_of(&span, key) {
                    self.errors.push((Some(span.clone()), message));
                }
                self.find(view, |_, value| value.span() == span && is_table(value))
            }
            None => {
                let found = self.find(view, |key, value| {
                    let within = |s: Range<usize>| s.start <= span.start && span.end <= s.end;
                    key.is_some_and(within) || within(value.span())
                });
                let found = found.map(|found| self.narrow::<T>(view, found, &span, &message));
                self.errors.push((Some(span.clone()), message));
                found
            }
        };
        let Some((item, path, holders)) = target else {
            return Step::Stop(Settled::Stuck);
        };
        let value = (self.value_at(&path).cloned())
            .and_then(|v| toml::Value::deserialize(ValueDeserializer::from(v)).ok());
        let before = self.refused.items.len();
        let removal = Removal {
            path: path.clone(),
            holders,
            value,
        };
        self.refused.leave_out(item, removal);
        if self.refused.items.len() == before {
            // Refused again after it was left out: nothing more can be learnt.
            return Step::Stop(Settled::Stuck);
        }
        Step::Refused(path)
    }

    /// `view` of what is left of the document, deserialized.
    fn attempt<T: DeserializeOwned>(&mut self, view: View) -> Result<T, toml::de::Error> {
        let copy = Spanned::new(
            self.document.span(),
            self.copy_table(self.document.get_ref(), view, true),
        );
        T::deserialize(Deserializer::from(copy))
    }

    /// serde places what it refuses in a list of values (`env = ["TZ", "lower case"]`) at
    /// the whole list: the element is found by trying without half of the candidates at a
    /// time (the same error again: it is in the half kept), so that only it is left out.
    fn narrow<T: DeserializeOwned>(
        &mut self,
        view: View,
        found: Target,
        span: &Range<usize>,
        message: &str,
    ) -> Target {
        let (item, mut path, mut holders) = found;
        let Some(list) = self.value_at(&path).filter(|v| v.span() == *span) else {
            return (item, path, holders);
        };
        let DeValue::Array(items) = list.get_ref() else {
            return (item, path, holders);
        };
        let top = path
            .iter()
            .all(|segment| matches!(segment, Segment::Key(_)));
        let shown = match top {
            true => self.shown(item, items.len(), view),
            false => 0..items.len(),
        };
        let mut candidates: Vec<(usize, Item)> = (shown
            .map(|i| (i, Item::Element(items[i].span().start))))
        .filter(|(_, element)| !self.refused.items.contains(element))
        .collect();
        while candidates.len() > 1 && self.work <= self.budget {
            let half = candidates.len() / 2;
            self.trying_without = candidates[half..].iter().map(|(_, e)| *e).collect();
            let again = self.attempt::<T>(view).err().is_some_and(|e| {
                e.span().as_ref() == Some(span) && e.message().trim_end() == message
            });
            self.trying_without.clear();
            match again {
                true => candidates.truncate(half),
                false => drop(candidates.drain(..half)),
            }
        }
        match candidates.as_slice() {
            [(index, element)] => {
                path.push(Segment::Index(*index));
                holders.push(list.span());
                (*element, path, holders)
            }
            _ => (item, path, holders),
        }
    }

    /// The deepest item of `view` for which `wanted(key span, value)` holds, with its path
    /// and the spans of what holds it.
    fn find(
        &self,
        view: View,
        wanted: impl Fn(Option<Range<usize>>, &Spanned<DeValue<'i>>) -> bool,
    ) -> Option<Target> {
        let mut best = None;
        let mut path = Vec::new();
        let mut holders = vec![self.document.span()];
        self.find_in_table(
            self.document.get_ref(),
            view,
            true,
            &wanted,
            &mut path,
            &mut holders,
            &mut best,
        );
        best
    }

    #[allow(clippy::too_many_arguments)]
    fn find_in_table(
        &self,
        table: &DeTable<'i>,
        view: View,
        top: bool,
        wanted: &impl Fn(Option<Range<usize>>, &Spanned<DeValue<'i>>) -> bool,
        path: &mut Vec<Segment>,
        holders: &mut Vec<Range<usize>>,
        best: &mut Option<Target>,
    ) {
        for (key, value) in table.iter() {
            let item = Item::Key(key.span().start);
            if self.refused.items.contains(&item) {
                continue;
            }
            path.push(Segment::Key(key.get_ref().to_string()));
            if wanted(Some(key.span()), value)
                && best.as_ref().is_none_or(|b| b.1.len() < path.len())
            {
                *best = Some((item, path.clone(), holders.clone()));
            }
            holders.push(value.span());
            match value.get_ref() {
                DeValue::Table(inner) => {
                    self.find_in_table(inner, view, top, wanted, path, holders, best)
                }
                DeValue::Array(items) => {
                    let shown = if top {
                        self.shown(item, items.len(), view)
                    } else {
                        0..items.len()
                    };
                    for index in shown {
                        let element = &items[index];
                        let item = Item::Element(element.span().start);
                        if self.refused.items.contains(&item) {
                            continue;
                        }
                        path.push(Segment::Index(index));
                        if wanted(None, element)
                            && best.as_ref().is_none_or(|b| b.1.len() < path.len())
                        {
                            *best = Some((item, path.clone(), holders.clone()));
                        }
                        if let DeValue::Table(inner) = element.get_ref() {
                            holders.push(element.span());
                            self.find_in_table(inner, view, false, wanted, path, holders, best);
                            holders.pop();
                        }
                        path.pop();
                    }
                }
                _ => {}
            }
            holders.pop();
            path.pop();
        }
    }

    /// The value at `path` of the document.
    fn value_at(&self, path: &[Segment]) -> Option<&'d Spanned<DeValue<'i>>> {
        let (first, rest) = path.split_first()?;
        let Segment::Key(key) = first else {
            return None;
        };
        let mut value = self.document.get_ref().get(key.as_str())?;
        for segment in rest {
            value = match (segment, value.get_ref()) {
                (Segment::Key(key), DeValue::Table(table)) => table.get(key.as_str())?,
                (Segment::Index(index), DeValue::Array(items)) => items.get(*index)?,
                _ => return None,
            };
        }
        Some(value)
    }

    /// The elements of the array held by `item` that `view` shows.
    fn shown(&self, item: Item, length: usize, view: View) -> Range<usize> {
        let large = self.large.iter().any(|(array, ..)| *array == item);
        match view {
            _ if !large => 0..length,
            View::Whole => 0..length,
            View::Window(array, from, size) if array == item => {
                from.min(length)..(from + size).min(length)
            }
            View::Window(..) | View::Skeleton => 0..0,
        }
    }

    /// A copy of `table` as `view` shows it, without what was left out; `top` while no
    /// array holds it (only those arrays are searched a window at a time).
    fn copy_table(&mut self, table: &DeTable<'i>, view: View, top: bool) -> DeTable<'i> {
        let mut copy = DeTable::new();
        for (key, value) in table.iter() {
            let item = Item::Key(key.span().start);
            if self.refused.items.contains(&item) {
                continue;
            }
            let value = match value.get_ref() {
                DeValue::Array(items) => {
                    let shown = if top {
                        self.shown(item, items.len(), view)
                    } else {
                        0..items.len()
                    };
                    Spanned::new(
                        value.span(),
                        DeValue::Array(self.copy_array(&items[shown], view)),
                    )
                }
                other => Spanned::new(value.span(), self.copy_value(other, view, top)),
            };
            copy.insert(key.clone(), value);
        }
        self.work += table.len() + 1;
        copy
    }

    fn copy_array(&mut self, items: &[Spanned<DeValue<'i>>], view: View) -> DeArray<'i> {
        let mut copy = DeArray::new();
        for element in items {
            let item = Item::Element(element.span().start);
            if self.refused.items.contains(&item) || self.trying_without.contains(&item) {
                continue;
            }
            let value = self.copy_value(element.get_ref(), view, false);
            copy.push(Spanned::new(element.span(), value));
        }
        self.work += items.len() + 1;
        copy
    }

    fn copy_value(&mut self, value: &DeValue<'i>, view: View, top: bool) -> DeValue<'i> {
        match value {
            DeValue::Table(table) => DeValue::Table(self.copy_table(table, view, top)),
            DeValue::Array(items) => DeValue::Array(self.copy_array(items, view)),
            scalar => scalar.clone(),
        }
    }
}

fn is_table(value: &Spanned<DeValue<'_>>) -> bool {
    matches!(value.get_ref(), DeValue::Table(_))
}

/// The number of values in `table` (at `path`), and (into `large`) the arrays no array holds
/// that are longer than a window.
fn survey(
    table: &DeTable<'_>,
    path: &mut Vec<Segment>,
    large: &mut Vec<(Item, Vec<Segment>, usize)>,
) -> usize {
    let mut values = 1;
    for (key, value) in table.iter() {
        path.push(Segment::Key(key.get_ref().to_string()));
        values += match value.get_ref() {
            DeValue::Table(inner) => survey(inner, path, large),
            DeValue::Array(items) => {
                if items.len() > WINDOW {
                    large.push((Item::Key(key.span().start), path.clone(), items.len()));
                }
                items
                    .iter()
                    .map(|item| count(item.get_ref()))
                    .sum::<usize>()
                    + 1
            }
            _ => 1,
        };
        path.pop();
    }
    values
}

fn count(value: &DeValue<'_>) -> usize {
    match value {
        DeValue::Table(table) => 1 + table.values().map(|v| count(v.get_ref())).sum::<usize>(),
        DeValue::Array(items) => 1 + items.iter().map(|v| count(v.get_ref())).sum::<usize>(),
        _ => 1,
    }
}

#[cfg(test)]
mod tests;
