//! `embedding_models`: a model of a provider, its secret parameters encrypted.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "embedding_models")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub name: String,
    pub description: Option<String>,
    pub provider: String,
    pub model_name: String,
    #[sea_orm(column_type = "JsonBinary")]
    pub parameters: Json,
    /// Encrypted JSON object of the secret parameters.
    pub secret_parameters: Option<Vec<u8>>,
    pub dimensions: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
