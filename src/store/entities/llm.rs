//! `llms`: a connection to a model server, its API key encrypted.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "llms")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub name: String,
    pub description: Option<String>,
    pub provider: String,
    pub endpoint: String,
    pub model: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub parameters: Json,
    /// Encrypted with the data-at-rest cipher.
    pub api_key: Option<Vec<u8>>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
