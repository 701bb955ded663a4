//! Authorization: the authenticated key with its permission entries and the checks made
//! against them, the key check itself, and the license check.

pub mod key_check;
pub mod license;
pub mod search_memory;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType, PermissionEntry, TYPE_ENTRY_ID};
use crate::error::ApiError;

/// The key that made the request, with all its permission entries, read from the database
/// on this request, so deactivation takes effect immediately on every replica (a search may
/// use one remembered from an earlier search, which its statement confirms still current:
/// `auth::search_memory`).
#[derive(Debug, Clone)]
pub struct AuthContext {
    pub key_id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub is_master: bool,
    pub entries: Vec<PermissionEntry>,
}

impl AuthContext {
    /// The level held on a whole object type.
    pub fn type_level(&self, object_type: ObjectType) -> AccessLevel {
        self.entries
            .iter()
            .filter(|e| e.object_type == object_type && e.object_id == TYPE_ENTRY_ID)
            .fold(AccessLevel::NONE, |acc, e| acc.union(e.level))
    }

    /// The level held on one object: the type entry combined with the object's own entry.
    pub fn object_level(&self, object_type: ObjectType, object_id: Uuid) -> AccessLevel {
        self.entries
            .iter()
            .filter(|e| {
                e.object_type == object_type
                    && (e.object_id == TYPE_ENTRY_ID || e.object_id == object_id)
            })
            .fold(AccessLevel::NONE, |acc, e| acc.union(e.level))
    }

    /// The classification allow-list on a pipeline (or on the type when `pipeline` is
    /// `None`): the union of the type entry's and the object entry's lists.
    pub fn allow_list(&self, pipeline: Option<Uuid>) -> Vec<String> {
        let mut list: Vec<String> = self
            .entries
            .iter()
            .filter(|e| {
                e.object_type == ObjectType::Pipelines
                    && (e.object_id == TYPE_ENTRY_ID || Some(e.object_id) == pipeline)
            })
            .flat_map(|e| e.classifications.iter().cloned())
            .collect();
        list.sort();
        list.dedup();
        list
    }

    /// Whether the allow-list permits every classification (`*`).
    pub fn allows_all_classifications(&self, pipeline: Option<Uuid>) -> bool {
        self.allow_list(pipeline).iter().any(|c| c == "*")
    }

    /// Requires `needed` on the whole type (creates): else 403 with id `None`.
    pub fn require_type(
        &self,
        object_type: ObjectType,
        needed: AccessLevel,
    ) -> Result<(), ApiError> {
        let held = self.type_level(object_type);
        if held.contains(needed) {
            Ok(())
        } else {
            Err(ApiError::AccessDenied {
                level: needed,
                object_type,
                id: None,
            })
        }
    }

    /// Requires `needed` on one object that the key can already read: else 403 `Some(id)`.
    pub fn require_object(
        &self,
        object_type: ObjectType,
        id: Uuid,
        needed: AccessLevel,
    ) -> Result<(), ApiError> {
        let held = self.object_level(object_type, id);
        if held.contains(needed) {
            Ok(())
        } else {
            Err(ApiError::AccessDenied {
                level: needed,
                object_type,
                id: Some(id),
            })
        }
    }

    /// Whether the key can read the object (lack of read is reported as "not found").
    pub fn can_read(&self, object_type: ObjectType, id: Uuid) -> bool {
        self.object_level(object_type, id)
            .contains(AccessLevel::READ)
    }

    /// The ids of objects of a type on which the key holds `needed` through object entries
    /// (lists add these to what the type entry grants).
    pub fn object_ids_with(&self, object_type: ObjectType, needed: AccessLevel) -> Vec<Uuid> {
        self.entries
            .iter()
            .filter(|e| {
                e.object_type == object_type
                    && e.object_id != TYPE_ENTRY_ID
                    && e.level.contains(needed)
            })
            .map(|e| e.object_id)
            .collect()
    }

    /// What a list of this type may show: `None` for every object (read on the type), else
    /// the ids readable through object entries.
    pub fn readable_ids(&self, object_type: ObjectType) -> Option<Vec<Uuid>> {
        if self.type_level(object_type).contains(AccessLevel::READ) {
            None
        } else {
            Some(self.object_ids_with(object_type, AccessLevel::READ))
        }
    }

    /// The `{access_level, classifications}` object of every type (`POST /login`,
    /// `GET /permissions`).
    pub fn type_permissions_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        for object_type in ObjectType::ALL {
            let classifications = if object_type == ObjectType::Pipelines {
                self.allow_list(None)
            } else {
                Vec::new()
            };
            map.insert(
                object_type.key().to_owned(),
                json!({
                    "access_level": self.type_level(object_type).bits(),
                    "classifications": classifications,
                }),
            );
        }
        Value::Object(map)
    }
}
