//! Synthetic texts from a topic model: 20,000 pseudo-words, 2,000 topics of 40 words. A text
//! mixes a topic's words with common ones, so texts of one topic embed close together and the
//! `hash` embedder's vectors differ from topic to topic.

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::SmallRng;

pub const VOCABULARY: usize = 20_000;
const COMMON: usize = 500;
pub const TOPICS: usize = 2_000;
const TOPIC_WORDS: usize = 40;

const SYLLABLES: [&str; 20] = [
    "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "ze", "ba", "de", "fi", "go", "hu", "ja",
    "ke", "li", "mo", "ni",
];

/// A pseudo-word per index: its base-20 digits as syllables (at least two), all distinct.
fn pseudo_word(index: usize) -> String {
    let mut digits = Vec::new();
    let mut n = index;
    loop {
        digits.push(n % SYLLABLES.len());
        n /= SYLLABLES.len();
        if n == 0 {
            break;
        }
    }
    if digits.len() < 2 {
        digits.push(0);
    }
    digits.iter().rev().map(|d| SYLLABLES[*d]).collect()
}

/// Words, topics and the two text shapes (fragments and queries).
pub struct Language {
    words: Vec<String>,
    topics: Vec<Vec<u32>>,
}

impl Language {
    pub fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let words = (0..VOCABULARY).map(pseudo_word).collect();
        let topics = (0..TOPICS)
            .map(|_| {
                (0..TOPIC_WORDS)
                    .map(|_| rng.random_range(COMMON as u32..VOCABULARY as u32))
                    .collect()
            })
            .collect();
        Self { words, topics }
    }

    /// A common word: heavily skewed towards the first indexes (40 % below 500).
    fn common(&self, rng: &mut SmallRng) -> &str {
        let u: f64 = rng.random();
        &self.words[((VOCABULARY as f64) * u.powi(4)) as usize]
    }

    /// A word of a topic, skewed towards its first words.
    fn topical(&self, rng: &mut SmallRng, topic: usize) -> &str {
        let u: f64 = rng.random();
        let i = ((TOPIC_WORDS as f64) * u.powf(1.5)) as usize;
        &self.words[self.topics[topic][i.min(TOPIC_WORDS - 1)] as usize]
    }

    fn sentence(tokens: Vec<&str>) -> String {
        let mut text = String::with_capacity(tokens.len() * 8);
        for (i, token) in tokens.iter().enumerate() {
            if i > 0 {
                text.push_str(if i % 12 == 0 { ". " } else { " " });
            }
            if i % 12 == 0 {
                let mut chars = token.chars();
                if let Some(first) = chars.next() {
                    text.extend(first.to_uppercase());
                    text.push_str(chars.as_str());
                }
            } else {
                text.push_str(token);
            }
        }
        text.push('.');
        text
    }

    /// A fragment of 40–64 words: 55 % primary topic, 15 % secondary, 30 % common words.
    pub fn fragment(&self, rng: &mut SmallRng, primary: usize, secondary: usize) -> String {
        let count = rng.random_range(40..=64);
        let tokens = (0..count)
            .map(|_| {
                let r: f64 = rng.random();
                if r < 0.55 {
                    self.topical(rng, primary)
                } else if r < 0.70 {
                    self.topical(rng, secondary)
                } else {
                    self.common(rng)
                }
            })
            .collect();
        Self::sentence(tokens)
    }

    /// A query of 6–14 words: 75 % of one topic, 25 % common words.
    pub fn query(&self, rng: &mut SmallRng) -> String {
        let topic = rng.random_range(0..TOPICS);
        let count = rng.random_range(6..=14);
        let tokens = (0..count)
            .map(|_| {
                if rng.random::<f64>() < 0.75 {
                    self.topical(rng, topic)
                } else {
                    self.common(rng)
                }
            })
            .collect();
        Self::sentence(tokens)
    }
}
