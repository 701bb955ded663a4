//! The Postgres text search configuration for a text, from its detected language.
//!
//! Detection uses `whatlang` (trigram and alphabet statistics; deterministic: the same text
//! always gives the same answer). Its languages map to the Postgres 18 configurations below;
//! `basque` and `irish` have no `whatlang` model and are never returned. Anything else —
//! empty text, text without letters, a detection that is not reliable, a language without
//! configuration (Polish, Chinese, …) — gives `simple`.
//!
//! A detection is reliable when `whatlang`'s confidence (how far the best language is ahead
//! of the second) exceeds 0.9, or — for the close languages `whatlang` cannot tell apart with
//! confidence even on long texts, Danish/Norwegian Bokmål and Hindi/Marathi/Nepali — when it
//! exceeds 0.9 once the other languages of that group are left out: the text is then reliably
//! of the group, and the best language of the group is kept.

use whatlang::Lang;

/// Fallback configuration: no stemming, no stop words.
pub const SIMPLE: &str = "simple";

/// Every configuration [`text_search_config`] can return besides [`SIMPLE`], sorted.
pub const DETECTED_CONFIGS: [&str; 26] = [
    "arabic",
    "armenian",
    "catalan",
    "danish",
    "dutch",
    "english",
    "finnish",
    "french",
    "german",
    "greek",
    "hindi",
    "hungarian",
    "indonesian",
    "italian",
    "lithuanian",
    "nepali",
    "norwegian",
    "portuguese",
    "romanian",
    "russian",
    "serbian",
    "spanish",
    "swedish",
    "tamil",
    "turkish",
    "yiddish",
];

/// A detection outcome, for callers that want to apply their own policy (for example a short
/// search query that should follow the language of the indexed fragments).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectedLanguage {
    /// ISO 639-3 code of the detected language (`eng`, `nob`, …).
    pub code: &'static str,
    /// Its Postgres configuration, [`SIMPLE`] when Postgres has none for it.
    pub config: &'static str,
    /// Confidence in `0.0..=1.0`.
    pub confidence: f64,
    /// What [`text_search_config`] requires: `confidence > 0.9`, or the same within a group
    /// of close languages (see the module documentation).
    pub reliable: bool,
}

/// The Postgres configuration of a `whatlang` language, if Postgres has one.
fn config_of(lang: Lang) -> Option<&'static str> {
    Some(match lang {
        Lang::Ara => "arabic",
        Lang::Hye => "armenian",
        Lang::Cat => "catalan",
        Lang::Dan => "danish",
        Lang::Nld => "dutch",
        Lang::Eng => "english",
        Lang::Fin => "finnish",
        Lang::Fra => "french",
        Lang::Deu => "german",
        Lang::Ell => "greek",
        Lang::Hin => "hindi",
        Lang::Hun => "hungarian",
        Lang::Ind => "indonesian",
        Lang::Ita => "italian",
        Lang::Lit => "lithuanian",
        Lang::Nep => "nepali",
        Lang::Nob => "norwegian",
        Lang::Por => "portuguese",
        Lang::Ron => "romanian",
        Lang::Rus => "russian",
        Lang::Srp => "serbian",
        Lang::Spa => "spanish",
        Lang::Swe => "swedish",
        Lang::Tam => "tamil",
        Lang::Tur => "turkish",
        Lang::Yid => "yiddish",
        _ => return None,
    })
}

/// Groups of languages too close for `whatlang` to separate with confidence.
const CLOSE_LANGUAGES: [&[Lang]; 2] = [&[Lang::Dan, Lang::Nob], &[Lang::Hin, Lang::Mar, Lang::Nep]];

/// Whether `lang`, found with a low confidence, is reliably detected once the other languages
/// of its group are left out.
fn reliable_within_group(text: &str, lang: Lang) -> bool {
    let Some(group) = CLOSE_LANGUAGES.iter().find(|group| group.contains(&lang)) else {
        return false;
    };
    let others: Vec<Lang> = group
        .iter()
        .copied()
        .filter(|&other| other != lang)
        .collect();
    whatlang::Detector::with_denylist(others)
        .detect(text)
        .is_some_and(|info| info.lang() == lang && info.is_reliable())
}

/// Detects the language of `text`; `None` when nothing can be said (empty text, no letters).
/// `confidence` is `whatlang`'s; `reliable` also accounts for the close-language groups.
pub fn detect_language(text: &str) -> Option<DetectedLanguage> {
    let info = whatlang::detect(text)?;
    let lang = info.lang();
    Some(DetectedLanguage {
        code: lang.code(),
        config: config_of(lang).unwrap_or(SIMPLE),
        confidence: info.confidence(),
        reliable: info.is_reliable() || reliable_within_group(text, lang),
    })
}

/// The Postgres text search configuration for `text`: the one of its language when that is
/// detected reliably and Postgres has one, else `simple`.
pub fn text_search_config(text: &str) -> &'static str {
    match detect_language(text) {
        Some(detected) if detected.reliable => detected.config,
        _ => SIMPLE,
    }
}

/// The Postgres text search configuration of `text`'s likeliest language, however unsure the
/// detection (short texts rarely reach a reliable one); `simple` when no language is found or
/// Postgres has none for it. For a query that looks for words among fragments indexed under
/// their own configurations (the hybrid search's lexical list), not for indexing.
pub fn likeliest_text_search_config(text: &str) -> &'static str {
    detect_language(text).map_or(SIMPLE, |detected| detected.config)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENTENCES: [(&str, &str); 26] = [
        (
            "english",
            "The quick brown fox jumps over the lazy dog while the children are playing in the garden.",
        ),
        (
            "spanish",
            "El rápido zorro marrón salta sobre el perro perezoso mientras los niños juegan en el jardín.",
        ),
        (
            "french",
            "Le renard brun rapide saute par-dessus le chien paresseux pendant que les enfants jouent dans le jardin.",
        ),
        (
            "german",
            "Der schnelle braune Fuchs springt über den faulen Hund, während die Kinder im Garten spielen.",
        ),
        (
            "italian",
            "La volpe marrone veloce salta sopra il cane pigro mentre i bambini giocano nel giardino.",
        ),
        (
            "portuguese",
            "A rápida raposa marrom pula sobre o cão preguiçoso enquanto as crianças brincam no jardim.",
        ),
        (
            "dutch",
            "De snelle bruine vos springt over de luie hond terwijl de kinderen in de tuin spelen. Het is vandaag een mooie dag en iedereen is blij dat de zon weer schijnt.",
        ),
        (
            "russian",
            "Быстрая коричневая лиса прыгает через ленивую собаку, пока дети играют в саду.",
        ),
        (
            "swedish",
            "Den snabba bruna räven hoppar över den lata hunden medan barnen leker i trädgården.",
        ),
        (
            "danish",
            "Den hurtige brune ræv springer over den dovne hund, mens børnene leger i haven. Det er en dejlig dag i dag, og alle er glade for, at solen skinner igen.",
        ),
        (
            "norwegian",
            "Norge er et land i Nord-Europa. Hovedstaden heter Oslo, og landet har omtrent fem millioner innbyggere. Været er ofte kaldt om vinteren, men sommeren kan være ganske varm. Mange nordmenn liker å gå på tur i fjellet og ikke minst å gå på ski.",
        ),
        (
            "finnish",
            "Nopea ruskea kettu hyppää laiskan koiran yli, kun lapset leikkivät puutarhassa.",
        ),
        (
            "turkish",
            "Hızlı kahverengi tilki tembel köpeğin üzerinden atlarken çocuklar bahçede oynuyor.",
        ),
        (
            "hungarian",
            "A gyors barna róka átugrik a lusta kutya felett, miközben a gyerekek a kertben játszanak.",
        ),
        (
            "romanian",
            "Vulpea maro rapidă sare peste câinele leneș în timp ce copiii se joacă în grădină.",
        ),
        (
            "arabic",
            "يقفز الثعلب البني السريع فوق الكلب الكسول بينما يلعب الأطفال في الحديقة.",
        ),
        (
            "greek",
            "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο ενώ τα παιδιά παίζουν στον κήπο.",
        ),
        (
            "indonesian",
            "Rubah cokelat yang cepat melompati anjing yang malas sementara anak-anak bermain di taman.",
        ),
        (
            "hindi",
            "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है जबकि बच्चे बगीचे में खेल रहे हैं।",
        ),
        (
            "catalan",
            "La guineu marró ràpida salta per sobre del gos mandrós mentre els nens juguen al jardí.",
        ),
        (
            "lithuanian",
            "Greita ruda lapė peršoka tinginį šunį, kol vaikai žaidžia sode. Šiandien yra graži diena ir visi džiaugiasi, kad vėl šviečia saulė.",
        ),
        (
            "nepali",
            "नेपाल दक्षिण एसियामा अवस्थित एक भूपरिवेष्टित देश हो। यसको राजधानी काठमाडौं हो। नेपालमा धेरै जातजाति र भाषाभाषीका मानिसहरू बसोबास गर्छन्।",
        ),
        (
            "serbian",
            "Брза смеђа лисица скаче преко лењог пса док се деца играју у башти.",
        ),
        (
            "tamil",
            "வேகமான பழுப்பு நரி சோம்பேறி நாயின் மேல் குதிக்கிறது, குழந்தைகள் தோட்டத்தில் விளையாடுகிறார்கள்.",
        ),
        (
            "yiddish",
            "דער גיכער ברוינער פֿוקס שפּרינגט איבער דעם פֿוילן הונט בשעת די קינדער שפּילן אין גאָרטן.",
        ),
        (
            "armenian",
            "Արագ շագանակագույն աղվեսը ցատկում է ծույլ շան վրայով, մինչ երեխաները խաղում են այգում։",
        ),
    ];

    #[test]
    fn detects_each_supported_language() {
        let mut wrong = Vec::new();
        for (expected, sentence) in SENTENCES {
            let got = text_search_config(sentence);
            if got != expected {
                wrong.push(format!(
                    "{expected}: got {got} ({:?})",
                    detect_language(sentence)
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        let mut configs: Vec<&str> = SENTENCES.iter().map(|(config, _)| *config).collect();
        configs.sort_unstable();
        assert_eq!(configs, DETECTED_CONFIGS);
    }

    #[test]
    fn falls_back_to_simple() {
        // Empty, blank, no letters.
        for text in ["", "   \n\t", "12345 678 90", "!!! ??? ...", "👍🏽🎉"] {
            assert_eq!(text_search_config(text), SIMPLE, "{text:?}");
        }
        assert_eq!(detect_language(""), None);
        // Languages without a Postgres configuration.
        for text in [
            "Szybki brązowy lis przeskakuje nad leniwym psem, podczas gdy dzieci bawią się w ogrodzie.",
            "敏捷的棕色狐狸跳过了懒狗，孩子们正在花园里玩耍。",
            "素早い茶色の狐が怠け者の犬を飛び越え、子供たちは庭で遊んでいます。",
            "빠른 갈색 여우가 게으른 개를 뛰어넘는 동안 아이들은 정원에서 놀고 있습니다.",
            "Rychlá hnědá liška skáče přes líného psa, zatímco děti si hrají na zahradě.",
        ] {
            assert_eq!(
                text_search_config(text),
                SIMPLE,
                "{text:?} {:?}",
                detect_language(text)
            );
        }
    }

    #[test]
    fn unreliable_detection_falls_back_to_simple() {
        // Too short to tell.
        for text in ["ok", "de", "a"] {
            let detected = detect_language(text);
            assert!(
                detected.is_none_or(|d| !d.reliable),
                "{text:?} {detected:?}"
            );
            assert_eq!(text_search_config(text), SIMPLE, "{text:?}");
        }
    }

    #[test]
    fn detection_is_deterministic() {
        for (_, sentence) in SENTENCES {
            let first = detect_language(sentence);
            for _ in 0..3 {
                assert_eq!(detect_language(sentence), first);
            }
        }
        let detected = detect_language(SENTENCES[0].1);
        assert_eq!(detected.map(|d| d.code), Some("eng"));
        assert_eq!(detected.map(|d| d.config), Some("english"));
    }
}
