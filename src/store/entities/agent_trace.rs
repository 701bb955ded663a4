//! `agent_traces`: an execution's trace, its parts encrypted.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_traces")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub api_key_id: Uuid,
    pub agent_id: Uuid,
    pub pipeline_id: Uuid,
    pub llm_id: Uuid,
    pub retrievals: Vec<u8>,
    pub messages: Vec<u8>,
    pub answer: Option<Vec<u8>>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
