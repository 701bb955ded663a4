-- Taxonomies: hierarchies of metadata values used by the `$teq` filter operator. A link
-- (parent field and value → child field and value) is stored once across all taxonomies.

CREATE TABLE taxonomies (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    description text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE taxonomy_entries (
    id           uuid PRIMARY KEY,
    taxonomy_id  uuid NOT NULL REFERENCES taxonomies (id) ON DELETE CASCADE,
    parent_field text NOT NULL,
    parent_value text NOT NULL,
    child_field  text NOT NULL,
    child_value  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (parent_field, parent_value, child_field, child_value)
);

-- `$teq` walks from a (field, value) to its children, recursively.
CREATE INDEX taxonomy_entries_parent_idx ON taxonomy_entries (parent_field, parent_value);
CREATE INDEX taxonomy_entries_taxonomy_idx ON taxonomy_entries (taxonomy_id, id);
