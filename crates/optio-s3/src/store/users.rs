//! Users and their access keys: made, listed, rotated and removed by `optio s3 user`, and
//! looked up for every signed request (the secrets remembered for [`CACHE_TTL`]).

use std::time::Instant;

use serde::Serialize;

use super::error::{GatewayError, Result};
use super::gateway::{CACHE_TTL, Gateway};
use super::layout::{KEY_PREFIX, KeyRecord, USER_PREFIX, UserRecord, json, parse};

/// A user, as listed.
#[derive(Clone, Debug, Serialize)]
pub struct User {
    /// The name.
    pub name: String,
    /// The access key.
    pub access_key: String,
    /// Creation or last rotation, microseconds since the Unix epoch.
    pub created_micros: u64,
}

/// A new key pair, shown once.
#[derive(Clone, Debug, Serialize)]
pub struct KeyPair {
    /// The access key.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
}

/// Makes an access key (20 upper-case letters and digits, as AWS's) or a secret (40 chars).
fn random_text(len: usize, alphabet: &[u8]) -> String {
    let mut raw = vec![0u8; len];
    getrandom::fill(&mut raw).expect("the system's random number generator works");
    raw.iter().map(|b| alphabet[usize::from(*b) % alphabet.len()] as char).collect()
}

fn new_key_pair() -> KeyPair {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    KeyPair {
        access_key: format!("OPT{}", random_text(17, UPPER)),
        secret_key: random_text(40, SECRET),
    }
}

/// Checks a user name: 1 to 64 letters, digits and `_.@-`.
pub fn validate_user_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(GatewayError::InvalidArgument(format!(
            "'{name}' is not a valid user name: use 1 to 64 letters, digits and _ . @ -"
        )))
    }
}

impl Gateway {
    /// Makes a user and its first key pair.
    pub async fn create_user(&self, name: &str) -> Result<KeyPair> {
        validate_user_name(name)?;
        if self.get_opt(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await?.is_some() {
            return Err(GatewayError::UserExists(name.to_string()));
        }
        self.issue_key(name).await
    }

    async fn issue_key(&self, name: &str) -> Result<KeyPair> {
        let pair = new_key_pair();
        let key = KeyRecord { user: name.to_string(), secret_key: pair.secret_key.clone() };
        let pool = &self.meta_pool;
        self.client.put(pool, &format!("{KEY_PREFIX}{}", pair.access_key), json(&key)).await?;
        let user = UserRecord { access_key: pair.access_key.clone() };
        self.client.put(pool, &format!("{USER_PREFIX}{name}"), json(&user)).await?;
        Ok(pair)
    }

    async fn user(&self, name: &str) -> Result<(UserRecord, u64)> {
        validate_user_name(name)?;
        match self.get_opt(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await? {
            Some((info, bytes)) => Ok((parse("a user record", &bytes)?, info.version.0)),
            None => Err(GatewayError::NoSuchUser(name.to_string())),
        }
    }

    /// Every user.
    pub async fn users(&self) -> Result<Vec<User>> {
        let mut out = Vec::new();
        for info in self.list_all(&self.meta_pool, USER_PREFIX).await? {
            let name = info.key[USER_PREFIX.len()..].to_string();
            let (record, created_micros) = self.user(&name).await?;
            out.push(User { name, access_key: record.access_key, created_micros });
        }
        Ok(out)
    }

    /// Removes a user and its key.
    pub async fn remove_user(&self, name: &str) -> Result<()> {
        let (record, _) = self.user(name).await?;
        self.delete_quiet(&self.meta_pool, &format!("{KEY_PREFIX}{}", record.access_key)).await?;
        self.delete_quiet(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await?;
        Ok(())
    }

    /// Gives a user a new key pair; the old one stops working (on every gateway within
    /// [`CACHE_TTL`], the time a gateway trusts a secret it has read).
    pub async fn rotate_user(&self, name: &str) -> Result<KeyPair> {
        let (old, _) = self.user(name).await?;
        let pair = self.issue_key(name).await?;
        self.delete_quiet(&self.meta_pool, &format!("{KEY_PREFIX}{}", old.access_key)).await?;
        self.secrets.lock().expect("secrets lock").remove(&old.access_key);
        Ok(pair)
    }

    /// The secret of an access key, if it is one.
    pub async fn secret_of(&self, access_key: &str) -> Result<Option<String>> {
        Ok(self.key_record(access_key).await?.map(|record| record.secret_key))
    }

    /// The user an access key belongs to, if it is one.
    pub async fn user_of(&self, access_key: &str) -> Result<Option<String>> {
        Ok(self.key_record(access_key).await?.map(|record| record.user))
    }

    async fn key_record(&self, access_key: &str) -> Result<Option<KeyRecord>> {
        if let Some((record, at)) = self.secrets.lock().expect("secrets lock").get(access_key)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(Some(record.clone()));
        }
        let plausible = !access_key.is_empty()
            && access_key.len() <= 128
            && access_key.bytes().all(|b| b.is_ascii_alphanumeric());
        if !plausible {
            return Ok(None);
        }
        let key = format!("{KEY_PREFIX}{access_key}");
        let Some((_, bytes)) = self.get_opt(&self.meta_pool, &key).await? else {
            self.secrets.lock().expect("secrets lock").remove(access_key);
            return Ok(None);
        };
        let record: KeyRecord = parse("an access key record", &bytes)?;
        self.secrets
            .lock()
            .expect("secrets lock")
            .insert(access_key.to_string(), (record.clone(), Instant::now()));
        Ok(Some(record))
    }
}
