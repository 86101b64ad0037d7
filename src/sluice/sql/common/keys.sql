-- API keys of the HTTP server (sluice.server.grants; backends/keys.py): a key is found by
-- the SHA-256 of its secret; the secret itself is never stored.

-- fragment: key_columns
-- What is read of a key: everything but the hash of its secret (backends.records.StoredKey).
name, grants, admin, created_at, used_at, revoked_at

-- name: keys_insert
INSERT INTO {schema}.api_keys (name, hash, grants, admin, created_at, signing)
VALUES (:name, :hash, :grants, :admin, :now, :signing);

-- name: keys_list
-- Every key, revoked ones too, without their hashes.
SELECT {key_columns}
FROM {schema}.api_keys
ORDER BY name;

-- name: keys_revoke
-- A key revoked once stays revoked as of then: revoking it again changes nothing, and
-- still finds it.
UPDATE {schema}.api_keys SET revoked_at = coalesce(revoked_at, :now)
WHERE name = :name;

-- name: keys_find
-- The key whose secret hashes to :hash, unless it was revoked (through the UNIQUE index
-- on hash).
SELECT {key_columns}
FROM {schema}.api_keys
WHERE hash = :hash AND revoked_at IS NULL;

-- name: keys_used
-- Not durable: a mark lost to a power cut only makes the key look used a little earlier.
UPDATE {schema}.api_keys SET used_at = :now WHERE name = :name;

-- name: keys_signing
-- The unrevoked key named :name and its encrypted signing secret (Signature Version 4
-- names a key by its access key id, the key's name; sluice.server.sqs).
SELECT {key_columns}, signing
FROM {schema}.api_keys
WHERE name = :name AND revoked_at IS NULL;

-- name: keys_set_signing
-- A key made without a signing secret gets one from a request that showed its secret.
UPDATE {schema}.api_keys SET signing = :signing
WHERE name = :name AND hash = :hash;
