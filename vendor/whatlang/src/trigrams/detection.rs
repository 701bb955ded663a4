use hashbrown::HashMap;

#[cfg(test)]
use super::LangProfile;
use super::LangProfileList;
use super::utils::{TrigramsWithPositions, get_trigrams_with_positions};
use super::{ARABIC_LANGS, CYRILLIC_LANGS, DEVANAGARI_LANGS, HEBREW_LANGS, LATIN_LANGS};
use super::{MAX_TOTAL_DISTANCE, MAX_TRIGRAM_DISTANCE, Trigram};
use crate::Lang;
use crate::core::{FilterList, Info, InternalQuery, Text, calculate_confidence};
use crate::scripts::grouping::MultiLangScript;

#[derive(Debug)]
pub struct RawOutcome {
    pub trigrams_count: usize,
    #[allow(dead_code)]
    pub raw_distances: Vec<(Lang, u32)>,
    pub scores: Vec<(Lang, f64)>,
}

#[inline]
pub fn detect(iquery: &InternalQuery) -> Option<Info> {
    let raw_outcome = raw_detect(iquery);
    let RawOutcome {
        trigrams_count,
        scores,
        ..
    } = raw_outcome;

    let mut raw_scores_iter = scores.into_iter();

    let opt_lang_score1 = raw_scores_iter.next();
    let opt_lang_score2 = raw_scores_iter.next();

    // TODO: Logic is duplicated in alphabets. Consider refactoring
    opt_lang_score1.map(|(lang1, score1)| {
        let script = iquery.multi_lang_script.to_script();
        let confidence = if let Some((_, score2)) = opt_lang_score2 {
            calculate_confidence(score1, score2, trigrams_count)
        } else {
            1.0
        };
        Info::new(script, lang1, confidence)
    })
}

#[inline]
pub fn raw_detect(iquery: &InternalQuery) -> RawOutcome {
    let lang_profile_list = script_to_lang_profile_list(iquery.multi_lang_script);
    calculate_scores_in_profiles(&iquery.text, iquery.filter_list, lang_profile_list)
}

fn script_to_lang_profile_list(script: MultiLangScript) -> LangProfileList {
    use MultiLangScript as MLS;
    match script {
        MLS::Latin => LATIN_LANGS,
        MLS::Cyrillic => CYRILLIC_LANGS,
        MLS::Arabic => ARABIC_LANGS,
        MLS::Devanagari => DEVANAGARI_LANGS,
        MLS::Hebrew => HEBREW_LANGS,
    }
}

#[inline]
fn calculate_scores_in_profiles(
    text: &Text,
    filter_list: &FilterList,
    lang_profile_list: LangProfileList,
) -> RawOutcome {
    let TrigramsWithPositions {
        trigram_positions, ..
    } = get_trigrams_with_positions(&text.lowercase());
    let unique_trigrams_count = trigram_positions.len();

    let mut lang_distances: Vec<(Lang, u32)> =
        calculate_distances(lang_profile_list, &trigram_positions)
            .into_iter()
            .zip(lang_profile_list)
            .filter(|(_, (lang, _))| filter_list.is_allowed(*lang))
            .map(|(dist, &(lang, _))| (lang, dist))
            .collect();

    // Sort languages by distance
    lang_distances.sort_unstable_by_key(|(_, dist)| *dist);

    let max_dist = unique_trigrams_count as u32 * MAX_TRIGRAM_DISTANCE;

    let raw_scores = lang_distances
        .iter()
        .map(|&(lang, distance)| (lang, distance_to_raw_score(distance, max_dist)))
        .collect();

    RawOutcome {
        trigrams_count: unique_trigrams_count,
        scores: raw_scores,
        raw_distances: lang_distances,
    }
}

/// Where each trigram stands in the profiles of one list: (index of the profile in the list,
/// rank in the profile) per occurrence.
type TrigramIndex = HashMap<Trigram, Vec<(u16, u16)>>;

/// The index of a profile list, built once per list.
fn trigram_index(lang_profile_list: LangProfileList) -> &'static TrigramIndex {
    use std::sync::OnceLock;
    static INDEXES: [OnceLock<TrigramIndex>; 5] = [const { OnceLock::new() }; 5];
    let lists: [LangProfileList; 5] = [
        LATIN_LANGS,
        CYRILLIC_LANGS,
        ARABIC_LANGS,
        DEVANAGARI_LANGS,
        HEBREW_LANGS,
    ];
    let slot = lists
        .iter()
        .position(|list| std::ptr::eq(*list, lang_profile_list))
        .expect("one of the profile lists");
    INDEXES[slot].get_or_init(|| {
        let mut index = TrigramIndex::new();
        for (l, &(_, profile)) in lang_profile_list.iter().enumerate() {
            for (rank, &trigram) in profile.iter().enumerate() {
                index
                    .entry(trigram)
                    .or_default()
                    .push((l as u16, rank as u16));
            }
        }
        index
    })
}

/// [`calculate_distance`] for every profile of the list, in the list's order, from the
/// text's trigrams: each text trigram is looked up once in the list's index instead of each
/// profile trigram once in the text's trigrams. Same results.
fn calculate_distances(
    lang_profile_list: LangProfileList,
    text_trigrams: &HashMap<Trigram, u32>,
) -> Vec<u32> {
    let index = trigram_index(lang_profile_list);
    // Per profile: trigrams found in the text, and the sum of their rank differences.
    let mut found = vec![(0u32, 0u32); lang_profile_list.len()];
    for (trigram, &n) in text_trigrams {
        if let Some(entries) = index.get(trigram) {
            for &(l, rank) in entries {
                let slot = &mut found[l as usize];
                slot.0 += 1;
                slot.1 += (n as i32 - rank as i32).unsigned_abs();
            }
        }
    }
    let count = text_trigrams.len() as u32;
    lang_profile_list
        .iter()
        .zip(found)
        .map(|(&(_, profile), (hits, diffs))| {
            let mut total_dist = (profile.len() as u32 - hits) * MAX_TRIGRAM_DISTANCE + diffs;
            if MAX_TRIGRAM_DISTANCE > count {
                let delta = MAX_TRIGRAM_DISTANCE - count;
                total_dist -= delta * MAX_TRIGRAM_DISTANCE;
            }
            total_dist.clamp(0, MAX_TOTAL_DISTANCE)
        })
        .collect()
}

/// The distance of one profile, trigram by trigram (the reference for
/// [`calculate_distances`]).
#[cfg(test)]
fn calculate_distance(lang_trigrams: LangProfile, text_trigrams: &HashMap<Trigram, u32>) -> u32 {
    let mut total_dist = 0u32;

    for (i, &trigram) in lang_trigrams.iter().enumerate() {
        let dist = match text_trigrams.get(&trigram) {
            Some(&n) => (n as i32 - i as i32).unsigned_abs(),
            None => MAX_TRIGRAM_DISTANCE,
        };
        total_dist += dist;
    }

    let count = text_trigrams.len() as u32;

    if MAX_TRIGRAM_DISTANCE > count {
        let delta = MAX_TRIGRAM_DISTANCE - count;
        total_dist -= delta * MAX_TRIGRAM_DISTANCE;
    }

    total_dist.clamp(0, MAX_TOTAL_DISTANCE)
}

#[inline]
fn distance_to_raw_score(distance: u32, max_distance: u32) -> f64 {
    let similarity = max_distance - distance;
    similarity as f64 / max_distance as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_distances_equal_the_profile_by_profile_ones() {
        let texts = [
            "Die Ordnung muss für immer in diesem Codebase bleiben",
            "The quick brown fox jumps over the lazy dog while the children are playing.",
            "Быстрая коричневая лиса прыгает через ленивую собаку, пока дети играют в саду.",
            "مرحبا بكم في هذا المكان الجميل حيث يمكنكم الاستمتاع بالطبيعة",
            "यह एक बहुत अच्छा दिन है और हम सब बाहर खेलने जा रहे हैं",
            "שלום לכולם, היום יום יפה מאוד ואנחנו הולכים לים",
            "a",
            "",
            "ka lo mi nu pe ra si to vu ze ba de fi go hu ja ke li mo ni",
        ];
        let lists = [
            LATIN_LANGS,
            CYRILLIC_LANGS,
            ARABIC_LANGS,
            DEVANAGARI_LANGS,
            HEBREW_LANGS,
        ];
        let mut long = String::new();
        for (i, text) in texts.iter().cycle().take(60).enumerate() {
            long.push_str(text);
            long.push_str(if i % 3 == 0 { " . " } else { " " });
            let sample = long.clone();
            for text in [*text, sample.as_str()] {
                let positions =
                    get_trigrams_with_positions(&Text::new(text).lowercase()).trigram_positions;
                for list in lists {
                    let expected: Vec<u32> = list
                        .iter()
                        .map(|&(_, profile)| calculate_distance(profile, &positions))
                        .collect();
                    assert_eq!(calculate_distances(list, &positions), expected, "{text}");
                }
            }
        }
    }

    #[test]
    fn test_when_german_is_given() {
        let text = "Die Ordnung muss für immer in diesem Codebase bleiben";
        let iq = InternalQuery {
            text: Text::new(text),
            filter_list: &FilterList::default(),
            multi_lang_script: MultiLangScript::Latin,
        };
        let raw_outcome = raw_detect(&iq);

        assert_eq!(raw_outcome.trigrams_count, 50);

        let &(first_lang, first_score) = raw_outcome.scores.first().unwrap();
        let &(_last_lang, last_score) = raw_outcome.scores.last().unwrap();

        assert_eq!(first_lang, Lang::Deu);

        assert!(first_score >= 0.0);
        assert!(first_score <= 1.0);

        assert!(last_score >= 0.0);
        assert!(last_score <= 1.0);
    }
}
