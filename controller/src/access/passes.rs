//! One pass at a time for each ServiceAccount of a runtime.
//!
//! Of the requests that name one ServiceAccount of a runtime, only its holder reaches the
//! runtime ([`super::ByRuntime::account_holder`]); but as a holder goes and the next takes
//! over, or while the cache does not show the holder yet, two passes could still run at once.
//! They must not: a pass makes the account and only then binds its rights to it (a binding
//! names its account by name, so the two cannot be one step), and the other pass's checks of
//! the account (`shoot::ensure_service_account`) could fall in between, after someone
//! relabelled the new account: they would find it marked as the other request's and not yet
//! bound, and issue a token that the binding then gives this request's rights. One after the
//! other, each pass finds the other's account with its binding. This orders the passes of one
//! process; the leader lease keeps other replicas from running any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use kim_shared::api::runtime_access::RuntimeAccess;
use kube::runtime::reflector::ObjectRef;

use crate::stored::StatusApart;

type Request = ObjectRef<StatusApart<RuntimeAccess>>;

/// A ServiceAccount of a runtime: runtime ID, namespace, name.
type Account = (String, String, String);

/// The running pass of an account, and the requests whose passes waited for it.
struct Running {
    request: Request,
    followers: Vec<Request>,
}

/// The passes running, by ServiceAccount.
pub struct AccountPasses {
    running: Mutex<HashMap<Account, Running>>,
    /// Where a request whose pass waited is sent when the pass it waited for ends: the
    /// controller runs it then.
    followers: UnboundedSender<Request>,
}

/// A running pass; its account is free again when it is dropped.
pub struct AccountPass {
    passes: Arc<AccountPasses>,
    account: Account,
}

impl AccountPasses {
    /// No pass running; requests that waited go to `followers` as the pass ends.
    pub fn new(followers: UnboundedSender<Request>) -> Self {
        Self {
            running: Mutex::default(),
            followers,
        }
    }

    /// Asks the controller to run `request` now.
    pub fn run_next(&self, request: Request) {
        // Closed only when the controller stops.
        let _ = self.followers.unbounded_send(request);
    }

    /// Begins a pass of `ra`, or says (`<namespace>/<name>`) which request's pass of the same
    /// account runs: `ra` is sent to the followers as that pass ends.
    pub fn begin(self: &Arc<Self>, ra: &StatusApart<RuntimeAccess>) -> Result<AccountPass, String> {
        let account = (
            ra.spec.runtime_id.clone(),
            ra.spec.service_account.namespace.clone(),
            ra.spec.service_account.name.clone(),
        );
        let request = ObjectRef::from_obj(ra);
        let mut running = crate::records::lock(&self.running);
        if let Some(other) = running.get_mut(&account) {
            let name = format!(
                "{}/{}",
                other.request.namespace.as_deref().unwrap_or_default(),
                other.request.name
            );
            if !other.followers.contains(&request) {
                other.followers.push(request);
            }
            return Err(name);
        }
        running.insert(
            account.clone(),
            Running {
                request,
                followers: Vec::new(),
            },
        );
        Ok(AccountPass {
            passes: self.clone(),
            account,
        })
    }
}

impl Drop for AccountPass {
    fn drop(&mut self) {
        let ended = crate::records::lock(&self.passes.running).remove(&self.account);
        for follower in ended.into_iter().flat_map(|r| r.followers) {
            self.passes.run_next(follower);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, runtime_id: &str, account: &str) -> StatusApart<RuntimeAccess> {
        super::super::test_request(name, runtime_id, ("apps", account), "2026-12-07T10:00:00Z")
    }

    #[test]
    fn one_pass_at_a_time_for_an_account_and_the_waiting_follow() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let passes = Arc::new(AccountPasses::new(tx));
        let klm = passes.begin(&request("klm", "rt-1", "klm")).unwrap();
        // Another account, or the same name in another runtime: free.
        let other = passes.begin(&request("other", "rt-1", "other")).unwrap();
        let elsewhere = passes.begin(&request("elsewhere", "rt-2", "klm")).unwrap();
        for _ in 0..2 {
            assert_eq!(
                passes.begin(&request("thief", "rt-1", "klm")).err(),
                Some("kcp-system/klm".to_owned())
            );
        }
        drop(other);
        drop(elsewhere);
        assert!(rx.try_recv().is_err(), "no one waited for those");
        drop(klm);
        let follower = rx.try_recv().unwrap();
        assert_eq!(follower.name, "thief");
        assert!(rx.try_recv().is_err(), "the waiting request follows once");
        let thief = passes.begin(&request("thief", "rt-1", "klm")).unwrap();
        assert!(passes.begin(&request("klm", "rt-1", "klm")).is_err());
        drop(thief);
        assert_eq!(rx.try_recv().unwrap().name, "klm");
    }
}
