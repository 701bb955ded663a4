//! Names: the length rule every name follows (pipelines, classifications, agents, LLMs,
//! keys, …), and values chosen by name from an ordered list on the wire (search kinds,
//! distance strategies, providers).
//!
//! Each surface lists such values in the order its own schema and error messages show them
//! (serde's `expected one of ...` follows it): a [`Listing`] is that order, and [`Listed`]
//! parses a name within it.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, EnumAccess, VariantAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The most characters a name may have.
pub const MAX_NAME_CHARS: usize = 255;

/// Whether `name` has 1 to [`MAX_NAME_CHARS`] characters (characters, not bytes).
pub fn has_valid_length(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.chars().count())
}

/// A value with a name on the wire.
pub trait Named: Copy + PartialEq + Send + Sync + 'static {
    /// The name on the wire.
    fn name(self) -> &'static str;
}

/// An ordered list of the values a surface accepts, with their names in the same order.
pub trait Listing: Send + Sync + 'static {
    type Item: Named;
    /// The values, in the surface's order.
    const ITEMS: &'static [Self::Item];
    /// Their names, in the same order.
    const NAMES: &'static [&'static str];
}

/// A value of the listing `L`, parsed from its name as serde's derive would parse a unit
/// variant: an unknown name is refused with `unknown variant `x`, expected one of ...` in the
/// listing's order.
pub struct Listed<L: Listing>(pub L::Item, PhantomData<L>);

impl<L: Listing> Listed<L> {
    pub fn new(item: L::Item) -> Self {
        Self(item, PhantomData)
    }
}

impl<L: Listing> Clone for Listed<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: Listing> Copy for Listed<L> {}

impl<L: Listing> fmt::Debug for Listed<L> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.0.name())
    }
}

impl<L: Listing> Serialize for Listed<L> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name())
    }
}

impl<'de, L: Listing> Deserialize<'de> for Listed<L> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor<L>(PhantomData<L>);

        impl<'de, L: Listing> Visitor<'de> for NameVisitor<L> {
            type Value = L::Item;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("variant identifier")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<L::Item, E> {
                L::ITEMS
                    .iter()
                    .copied()
                    .find(|item| item.name() == name)
                    .ok_or_else(|| E::unknown_variant(name, L::NAMES))
            }
        }

        struct ListingVisitor<L>(PhantomData<L>);

        impl<'de, L: Listing> Visitor<'de> for ListingVisitor<L> {
            type Value = L::Item;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a unit variant")
            }

            fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<L::Item, A::Error> {
                struct Seed<L>(PhantomData<L>);
                impl<'de, L: Listing> de::DeserializeSeed<'de> for Seed<L> {
                    type Value = L::Item;
                    fn deserialize<D: Deserializer<'de>>(
                        self,
                        deserializer: D,
                    ) -> Result<L::Item, D::Error> {
                        deserializer.deserialize_identifier(NameVisitor::<L>(PhantomData))
                    }
                }
                let (item, variant) = data.variant_seed(Seed::<L>(PhantomData))?;
                variant.unit_variant()?;
                Ok(item)
            }
        }

        deserializer
            .deserialize_enum("", L::NAMES, ListingVisitor::<L>(PhantomData))
            .map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_1_to_255_characters() {
        assert!(!has_valid_length(""));
        assert!(has_valid_length("a"));
        assert!(has_valid_length(&"é".repeat(255)));
        assert!(!has_valid_length(&"a".repeat(256)));
    }
}
