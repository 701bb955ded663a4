//! `permissions`: one entry of a key on an object type (the nil object id) or an object.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "permissions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub api_key_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub object_type: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub object_id: Uuid,
    pub permission: i16,
    pub classifications: Vec<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
