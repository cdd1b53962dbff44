//! The language functions of a run's threads given ids in the profile, after the module's,
//! one per function across the threads, and named there.

use std::collections::HashMap;

use super::{LanguageSamples, LANGUAGE_FUNCTION};
use crate::languages::{lua, quickjs, ScriptFunction};
use crate::profile::FunctionInfo;
use crate::run::stacks::StackSamples;

/// Gives the language functions of every thread's stacks (`threads`) ids after the
/// module's `functions`, and names them there (see [`Merging::add`]): what the threads
/// learnt, added up, if any walked a language.
pub fn merge<'a>(
    functions: &mut Vec<FunctionInfo>,
    threads: impl IntoIterator<Item = &'a mut StackSamples>,
    source_line: &dyn Fn(&str, i32) -> Option<String>,
) -> Option<LanguageSamples> {
    let mut merging = Merging::default();
    for samples in threads {
        let Some(own) = samples.languages.take() else {
            continue;
        };
        let map = merging.add(functions, own, source_line);
        let total = merging.total.as_mut()?;
        for ((f, line), ns) in std::mem::take(&mut samples.script_lines) {
            *total.lines.entry((map.id(f), line)).or_default() += ns;
        }
        for figures in [&mut samples.time, &mut samples.waited] {
            for ((mut path, call), ns) in std::mem::take(figures) {
                for f in path.iter_mut() {
                    *f = map.id(*f);
                }
                *figures.entry((path, call)).or_default() += ns;
            }
        }
    }
    merging.total
}

/// Gives the language functions one thread learnt (`own`, its lines by
/// [`LANGUAGE_FUNCTION`] ids) ids after the module's `functions`, in the order it learnt
/// them, and names them there: what it learnt, with the profile's ids.
pub fn merge_one(
    functions: &mut Vec<FunctionInfo>,
    own: LanguageSamples,
    source_line: &dyn Fn(&str, i32) -> Option<String>,
) -> LanguageSamples {
    let mut merging = Merging::default();
    merging.add(functions, own, source_line);
    merging.total.unwrap_or_default()
}

/// Threads' language functions merged so far.
#[derive(Default)]
struct Merging {
    total: Option<LanguageSamples>,
    ids: HashMap<ScriptFunction, u32>,
    /// Names given, and how many functions have each (two functions defined on one line
    /// and named alike are told apart by a number).
    named: HashMap<String, u32>,
}

/// A thread's language functions' ids in the profile, by their index.
struct IdMap(Vec<u32>);

impl IdMap {
    /// The profile's id of `f`, an id in a thread's stacks.
    fn id(&self, f: u32) -> u32 {
        match f & LANGUAGE_FUNCTION != 0 {
            true => self.0[(f & !LANGUAGE_FUNCTION) as usize],
            false => f,
        }
    }
}

impl Merging {
    /// Adds a thread's language functions to `functions`, each function seen first in
    /// this thread an id after them (its kind the language's name; the name its source
    /// line gives it, `source_line` reading a line of a script, see
    /// [`lua::name_in_source`]), and adds up what the thread counted.
    fn add(
        &mut self,
        functions: &mut Vec<FunctionInfo>,
        own: LanguageSamples,
        source_line: &dyn Fn(&str, i32) -> Option<String>,
    ) -> IdMap {
        let total = self.total.get_or_insert_with(|| LanguageSamples {
            language: own.language.clone(),
            ..LanguageSamples::default()
        });
        let (ids, named) = (&mut self.ids, &mut self.named);
        let map: Vec<u32> = own
            .functions
            .iter()
            .enumerate()
            .map(|(index, f)| {
                *ids.entry(f.clone()).or_insert_with(|| {
                    let id = functions.len() as u32;
                    // A function the interpreter names (JavaScript's) keeps its name; one
                    // it does not, the name its source gives it.
                    let name = match f.name.as_deref() {
                        Some("") => source_line(f.file(), f.line_defined)
                            .and_then(|line| quickjs::name_at(&line, f.last_line_defined)),
                        Some(_) => None,
                        None => source_line(f.file(), f.line_defined)
                            .and_then(|line| lua::name_in_source(&line))
                            .or_else(|| own.called.get(&(index as u32)).cloned()),
                    };
                    let mut name = f.display(name.as_deref());
                    let seen = named.entry(name.clone()).or_default();
                    *seen += 1;
                    if *seen > 1 {
                        name = format!("{name} #{seen}");
                    }
                    functions.push(FunctionInfo {
                        id,
                        name,
                        kind: own.language.clone(),
                    });
                    total.functions.push(f.clone());
                    total.ids.push(id);
                    id
                })
            })
            .collect();
        let map = IdMap(map);
        total.add_tallies(&own);
        for ((f, line), ns) in own.lines {
            *total.lines.entry((map.id(f), line)).or_default() += ns;
        }
        map
    }
}
