//! Connected librados cluster handles, shared per connection settings, and pool contexts on them.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use ceph::rados;

use super::keyring::{Identity, Keyring};
use super::{exit, ffi, keyring};
use crate::error::{Error, Op, Result, Target, check, errno_of};
use crate::sync;

/// Everything that makes two connections different. Transfers with equal settings share one
/// handle, so glance-api keeps one cluster connection per backend instead of one per request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectOptions {
    /// Ceph configuration file; `None` lets librados search its default locations.
    pub conf_file: Option<String>,
    /// RADOS user without the `client.` prefix; `None` lets librados choose.
    pub user: Option<String>,
    /// Seconds for librados operation and mount timeouts, as glance's `rados_connect_timeout`.
    pub timeout: Option<u32>,
}

impl ConnectOptions {
    /// From glance's settings, where an empty string means unset.
    pub fn new(conf_file: Option<String>, user: Option<String>, timeout: Option<u32>) -> Self {
        ConnectOptions {
            conf_file: conf_file.filter(|c| !c.is_empty()),
            user: user.filter(|u| !u.is_empty()),
            timeout,
        }
    }
}

/// The librados options that glance's `rados_connect_timeout` sets, as the stock driver sets
/// them; `glance-rbd-native` sets the same on its `rados` connections (`_TIMEOUT_OPTIONS`).
pub const TIMEOUT_OPTIONS: [&str; 3] = [
    "rados_osd_op_timeout",
    "rados_mon_op_timeout",
    "client_mount_timeout",
];

/// A connected `rados_t`, shut down when the last user lets go of it.
pub struct Cluster {
    handle: rados::rados_t,
    fsid: String,
    /// The conf file and user, for errors.
    settings: String,
    /// The cephx entity it authenticates as, for errors: "client.glance".
    entity: String,
    /// What it was made with: a fenced handle is replaced by a new one of the same.
    options: ConnectOptions,
    /// The process that made it: a child of `fork()` has the handle but none of its threads.
    pid: u32,
}

// SAFETY: a connected rados_t may be used from any thread; librados locks internally.
unsafe impl Send for Cluster {}
// SAFETY: as above, concurrent calls on one rados_t are supported by librados.
unsafe impl Sync for Cluster {}

/// One entry per connection settings: connected, or being connected by one caller.
enum Entry {
    Ready(Arc<Cluster>),
    Connecting(Arc<Attempt>),
}

/// A connect in progress. Callers with the same settings wait for its outcome rather than start
/// their own; callers with other settings never wait for it, so a backend whose monitors do not
/// answer holds up only its own transfers, each for one librados timeout at most.
#[derive(Default)]
struct Attempt {
    outcome: Mutex<Option<Result<Arc<Cluster>>>>,
    done: Condvar,
}

impl Attempt {
    fn wait(&self) -> Result<Arc<Cluster>> {
        let mut outcome = lock(&self.outcome);
        loop {
            if let Some(outcome) = outcome.as_ref() {
                return outcome.clone();
            }
            outcome = sync::wait(&self.done, outcome);
        }
    }

    fn publish(&self, outcome: Result<Arc<Cluster>>) {
        *lock(&self.outcome) = Some(outcome);
        self.done.notify_all();
    }
}

/// Publishes the connecting caller's outcome, and clears the entry, even if it unwinds.
struct Publish<'a> {
    options: &'a ConnectOptions,
    attempt: Arc<Attempt>,
    outcome: Option<Result<Arc<Cluster>>>,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or_else(|| {
            Err(Error::Internal(
                "connecting to the Ceph cluster panicked".into(),
            ))
        });
        {
            let mut shared = lock(&SHARED);
            let shared = &mut this_process(&mut shared).entries;
            match &outcome {
                Ok(cluster) => {
                    shared.insert(self.options.clone(), Entry::Ready(Arc::clone(cluster)));
                }
                // Not cached: the next transfer tries again, the cluster may be back.
                Err(_) => {
                    shared.remove(self.options);
                }
            }
        }
        self.attempt.publish(outcome);
    }
}

/// The cache of one process. A child of `fork()` has the parent's handles but none of the
/// threads behind them: using one, or shutting it down, hangs. The child starts afresh and
/// leaves the parent's handles alone (leaked, never touched).
struct Shared {
    pid: u32,
    entries: HashMap<ConnectOptions, Entry>,
    /// Set when this process began to exit (`shut_down_idle`): nothing connects anew after it.
    exiting: bool,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// This process's cache, after forgetting one inherited over a fork. Never logs: the exit
/// handler calls it.
fn this_process(shared: &mut Option<Shared>) -> &mut Shared {
    let pid = std::process::id();
    if let Some(inherited) = shared.take_if(|shared| shared.pid != pid) {
        std::mem::forget(inherited);
    }
    shared.get_or_insert_with(|| Shared {
        pid,
        entries: HashMap::new(),
        exiting: false,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    sync::lock(mutex)
}

/// At `exit()`: shuts down this process's idle connections, those nothing but the cache holds
/// (no transfer, no I/O context, no janitor), and makes the cache refuse new connects. Those
/// in use are left as they were: their transfers end as they would have. Never logs, never
/// calls into Python, and waits for the cache lock briefly only: its holders keep it for a map
/// operation, never while connecting, so a lock not free within 100 ms is held by a thread
/// that will not let go (it did not survive a fork), and exit() must not wait for it. The
/// connections then stay up, as they did before there was a handler.
pub(crate) fn shut_down_idle() {
    let mut guard = None;
    for _ in 0..100 {
        match SHARED.try_lock() {
            Ok(locked) => guard = Some(locked),
            Err(TryLockError::Poisoned(poisoned)) => guard = Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        }
        break;
    }
    let Some(mut guard) = guard else { return };
    let shared = this_process(&mut guard);
    shared.exiting = true;
    let mut idle = Vec::new();
    shared.entries.retain(|_, entry| match entry {
        // Only the cache holds it, and only under this lock can another holder appear.
        Entry::Ready(cluster) if Arc::strong_count(cluster) == 1 => {
            idle.push(Arc::clone(cluster));
            false
        }
        _ => true,
    });
    drop(guard);
    // rados_shutdown for each, outside the lock: it joins the handle's messenger threads.
    drop(idle);
}

impl Cluster {
    /// The connected cluster for these settings, connecting on first use. The cache lock is
    /// never held while connecting.
    pub fn shared(options: &ConnectOptions) -> Result<Arc<Cluster>> {
        let mut guard = lock(&SHARED);
        let forked = guard
            .as_ref()
            .filter(|shared| shared.pid != std::process::id())
            .map(|inherited| (inherited.pid, inherited.entries.len()));
        let shared = this_process(&mut guard);
        if let Some((parent, count)) = forked {
            log::debug!("forked: leaving {count} connections of process {parent} alone");
        }
        if shared.exiting {
            return Err(Error::Connect {
                step: "connecting while the process is exiting".into(),
                settings: Some(describe(options)),
                errno: libc::ECANCELED,
                identity: None,
            });
        }
        let shared = &mut shared.entries;
        match shared.get(options) {
            Some(Entry::Ready(cluster)) => return Ok(Arc::clone(cluster)),
            Some(Entry::Connecting(attempt)) => {
                let attempt = Arc::clone(attempt);
                drop(guard);
                return attempt.wait();
            }
            None => {}
        }
        let attempt = Arc::new(Attempt::default());
        shared.insert(options.clone(), Entry::Connecting(Arc::clone(&attempt)));
        drop(guard);
        let mut publish = Publish {
            options,
            attempt,
            outcome: None,
        };
        let outcome = Cluster::configured(options).and_then(Cluster::connect);
        if outcome.is_ok() {
            // After the connect: libceph-common registers some of its static destructors
            // lazily, at the first connect, and the handler must run before them.
            exit::register(shut_down_idle);
        }
        publish.outcome = Some(outcome.clone());
        outcome
    }

    /// Number of connected clusters cached, for tests of connection reuse.
    pub fn shared_count() -> usize {
        this_process(&mut lock(&SHARED))
            .entries
            .values()
            .filter(|entry| matches!(entry, Entry::Ready(_)))
            .count()
    }

    /// Drops this connection from the cache, if it is there, when `err` is a refusal (EPERM,
    /// EACCES): cephx tickets carry the caps they were issued with, so this connection would
    /// go on being refused after the operator grants the missing caps, until its tickets are
    /// renewed (an hour by default). The next transfer connects afresh and gets them; those
    /// running keep this one until they end.
    pub(crate) fn forget_if_refused(self: &Arc<Self>, err: &Error) {
        match err.errno() {
            Some(libc::EPERM | libc::EACCES) => self.forget("it was refused"),
            // Blocklisted (Ceph's EBLOCKLISTED): nothing it sends goes through any more.
            Some(libc::ESHUTDOWN) => self.forget_fenced(),
            _ => {}
        }
    }

    /// Runs `first`, the first operation of a transfer (the creation or the open of its image).
    /// A connection fenced while idle in the cache is replaced, and `first` runs again on the
    /// new one; a refusal drops the connection from the cache.
    pub fn start_transfer<T>(
        self: &Arc<Self>,
        mut first: impl FnMut(&Arc<Cluster>) -> Result<T>,
    ) -> Result<T> {
        match first(self) {
            Err(err) if err.errno() == Some(libc::ESHUTDOWN) => {
                log::info!("{}: connecting again", self.entity());
                let again = self.replace_fenced()?;
                first(&again).inspect_err(|err| again.forget_if_refused_at_start(err))
            }
            other => other.inspect_err(|err| self.forget_if_refused_at_start(err)),
        }
    }

    /// As `forget_if_refused`, for the first operation of a transfer (the creation or the open
    /// of its image), where a timeout may be a refusal too: a Ceph 20 cluster leaves the
    /// operations of a user with no osd cap at all unanswered.
    fn forget_if_refused_at_start(self: &Arc<Self>, err: &Error) {
        match err.errno() {
            Some(libc::EPERM | libc::EACCES) => self.forget("it was refused"),
            Some(libc::ETIMEDOUT) => self.forget("the cluster did not answer"),
            Some(libc::ESHUTDOWN) => self.forget_fenced(),
            _ => {}
        }
    }

    /// Drops this connection, which was fenced (blocklisted), from the cache: the transfers
    /// that follow connect again.
    pub(crate) fn forget_fenced(self: &Arc<Self>) {
        self.forget("it was fenced (blocklisted)");
    }

    /// Whether this connection's operations time out (glance's rados_connect_timeout, or a
    /// bound of the native layer's own).
    pub(crate) fn times_out(&self) -> bool {
        self.options.timeout.is_some()
    }

    /// A connection with these settings whose operations time out after `seconds`, shared as
    /// any; None if this one's do already.
    pub(crate) fn bounded(self: &Arc<Self>, seconds: u32) -> Result<Option<Arc<Cluster>>> {
        if self.options.timeout.is_some() {
            return Ok(None);
        }
        let options = ConnectOptions {
            timeout: Some(seconds),
            ..self.options.clone()
        };
        Cluster::shared(&options).map(Some)
    }

    /// A connection in place of this one, which was fenced: for the clean-up of its transfer.
    pub(crate) fn replace_fenced(self: &Arc<Self>) -> Result<Arc<Cluster>> {
        self.forget_fenced();
        Cluster::shared(&self.options)
    }

    fn forget(self: &Arc<Self>, why: &str) {
        let mut guard = lock(&SHARED);
        let entries = &mut this_process(&mut guard).entries;
        let before = entries.len();
        entries.retain(|_, entry| !matches!(entry, Entry::Ready(c) if Arc::ptr_eq(c, self)));
        if entries.len() < before {
            log::debug!(
                "dropped the connection of {} ({}): {why}",
                self.entity,
                self.settings
            );
        }
    }

    /// The error a connect with these settings gets when `rados_connect` fails with `errno`
    /// (`glance-rbd-native`, which connects through the `rados` module, asks for it): every
    /// step before the connect again, none of which touches the network, then what the
    /// keyring holds.
    pub fn connect_failure(options: &ConnectOptions, errno: i32) -> Error {
        match Cluster::configured(options) {
            Ok(cluster) => cluster.refused(-i64::from(errno)),
            Err(err) => err,
        }
    }

    /// Connects a configured handle, and reads the cluster's fsid.
    fn connect(mut cluster: Cluster) -> Result<Arc<Cluster>> {
        // SAFETY: the handle is live and configured.
        let ret = unsafe { rados::rados_connect(cluster.handle) };
        if ret < 0 {
            return Err(cluster.refused(ret.into()));
        }
        cluster.fsid = cluster.read_fsid()?;
        log::debug!(
            "connected to Ceph cluster {} ({})",
            cluster.fsid,
            cluster.settings
        );
        Ok(Arc::new(cluster))
    }

    /// A handle for these settings, configured as the `rados` Python binding does for glance:
    /// the conf file read, `CEPH_ARGS` applied, the timeouts set; not connected yet.
    fn configured(options: &ConnectOptions) -> Result<Cluster> {
        let settings = describe(options);
        let user = options.user.as_deref().map(cstring).transpose()?;
        let mut handle: rados::rados_t = ptr::null_mut();
        // SAFETY: handle is a valid out-pointer; user is NUL-terminated or null.
        let ret = unsafe {
            rados::rados_create(
                &mut handle,
                user.as_ref().map_or(ptr::null(), |u| u.as_ptr()),
            )
        };
        if ret < 0 {
            return Err(Error::Connect {
                step: "creating the cluster handle".into(),
                settings: Some(settings),
                errno: errno_of(ret.into()),
                identity: None,
            });
        }
        // From here on, `cluster` owns the handle and shuts it down on every exit path.
        let mut cluster = Cluster {
            handle,
            fsid: String::new(),
            settings,
            // librados' default id is "admin"; a user is an id, without the "client." prefix.
            entity: format!("client.{}", options.user.as_deref().unwrap_or("admin")),
            options: options.clone(),
            pid: std::process::id(),
        };
        let conf = options.conf_file.as_deref().map(cstring).transpose()?;
        // SAFETY: the handle is live; conf is NUL-terminated or null (search default paths).
        let ret = unsafe {
            rados::rados_conf_read_file(handle, conf.as_ref().map_or(ptr::null(), |c| c.as_ptr()))
        };
        if ret < 0 {
            return Err(cluster.error("reading the configuration file", ret.into()));
        }
        // SAFETY: the handle is live; a null name means the CEPH_ARGS variable.
        let ret = unsafe { rados::rados_conf_parse_env(handle, ptr::null()) };
        if ret < 0 {
            return Err(cluster.error("parsing CEPH_ARGS", ret.into()));
        }
        // This handle only streams whole images, written once or read once: librbd's cache
        // would copy every byte and hold up to 32 MiB more for nothing, and it rules out
        // zero-copy writes. Without it, librbd writes straight from the caller's buffer, which
        // the writer keeps alive until the write completes.
        cluster.conf_set("rbd_cache", "false")?;
        cluster.conf_set("rbd_disable_zero_copy_writes", "false")?;
        if let Some(timeout) = options.timeout {
            for key in TIMEOUT_OPTIONS {
                cluster.conf_set(key, &timeout.to_string())?;
            }
        }
        Ok(cluster)
    }

    /// The failure of `rados_connect`, with what the keyring holds for this entity.
    fn refused(&self, ret: i64) -> Error {
        let keyring = match (self.conf_get("key"), self.conf_get("keyfile")) {
            (Ok(key), Ok(file)) if key.is_empty() && file.is_empty() => {
                self.conf_get("keyring").map_or(Keyring::Elsewhere, |list| {
                    keyring::inspect(&self.entity, &list)
                })
            }
            _ => Keyring::Elsewhere,
        };
        Error::Connect {
            step: "connecting to the monitors".into(),
            settings: Some(self.settings.clone()),
            errno: errno_of(ret),
            identity: Some(Box::new(Identity {
                entity: self.entity.clone(),
                keyring,
            })),
        }
    }

    pub fn fsid(&self) -> &str {
        &self.fsid
    }

    pub(crate) fn entity(&self) -> &str {
        &self.entity
    }

    /// This client's global id: it names the client's watches.
    pub(crate) fn instance_id(&self) -> u64 {
        // SAFETY: the handle is connected for as long as self lives.
        unsafe { rados::rados_get_instance_id(self.handle) }
    }

    /// This client's address ("10.0.0.1:0/3710147553": its nonce names this one client
    /// instance), what blocklisting it names; None if librados cannot say.
    pub(crate) fn address(&self) -> Option<String> {
        let mut addrs: *mut c_char = ptr::null_mut();
        // SAFETY: the handle is connected; addrs is an out-pointer librados fills with a
        // buffer of its own, freed below.
        let ret = unsafe { ffi::rados_getaddrs(self.handle, &mut addrs) };
        if ret < 0 || addrs.is_null() {
            return None;
        }
        // SAFETY: NUL-terminated by librados.
        let text = unsafe { CStr::from_ptr(addrs) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: librados' buffer, freed once, after the copy.
        unsafe { rados::rados_buffer_free(addrs) };
        Some(plain_address(&text))
    }

    /// A configuration value as librados sees it (conf file, `CEPH_ARGS`, then defaults).
    pub(crate) fn conf_get(&self, key: &str) -> Result<String> {
        let key_c = cstring(key)?;
        let mut buf = vec![0 as c_char; 256];
        loop {
            // SAFETY: buf is writable for buf.len() bytes; key_c is NUL-terminated.
            let ret = unsafe {
                rados::rados_conf_get(self.handle, key_c.as_ptr(), buf.as_mut_ptr(), buf.len())
            };
            if ret == -libc::ENAMETOOLONG && buf.len() < 1 << 16 {
                buf.resize(buf.len() * 4, 0);
                continue;
            }
            if ret < 0 {
                return Err(self.error(format!("reading option '{key}'"), ret.into()));
            }
            // SAFETY: on success librados wrote a NUL-terminated string into buf.
            let value = unsafe { CStr::from_ptr(buf.as_ptr()) };
            return Ok(value.to_string_lossy().into_owned());
        }
    }

    fn conf_set(&mut self, key: &str, value: &str) -> Result<()> {
        let (key_c, value_c) = (cstring(key)?, cstring(value)?);
        // SAFETY: the handle is live and not yet connected; both strings are NUL-terminated.
        let ret = unsafe { rados::rados_conf_set(self.handle, key_c.as_ptr(), value_c.as_ptr()) };
        if ret < 0 {
            return Err(self.error(format!("setting option '{key}' to '{value}'"), ret.into()));
        }
        Ok(())
    }

    fn read_fsid(&self) -> Result<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf is writable for its length; librados NUL-terminates on success.
        let ret = unsafe { rados::rados_cluster_fsid(self.handle, buf.as_mut_ptr(), buf.len()) };
        if ret < 0 {
            return Err(self.error("reading the cluster fsid", ret.into()));
        }
        // SAFETY: NUL-terminated by librados, within buf.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Sends `json`, one command, to the active manager, through a connection of its own whose
    /// librados timeouts are `wait` (a manager command waits for an active manager for as long
    /// as the mon op timeout, which glance may leave unset: for ever). Its output, or its
    /// negative errno with the status text the manager (or the connect) gave.
    pub(crate) fn mgr_command(
        &self,
        json: &str,
        wait: Duration,
    ) -> std::result::Result<String, (i32, String)> {
        let mut options = self.options.clone();
        options.timeout = Some(u32::try_from(wait.as_secs()).unwrap_or(u32::MAX).max(1));
        let private = Cluster::configured(&options)
            .and_then(Cluster::connect)
            .map_err(|err| (-err.errno().unwrap_or(libc::EIO), err.to_string()))?;
        private.send_mgr_command(json)
    }

    fn send_mgr_command(&self, json: &str) -> std::result::Result<String, (i32, String)> {
        let cmd = cstring(json).map_err(|_| (-libc::EINVAL, String::new()))?;
        let mut cmds = [cmd.as_ptr()];
        let (mut out, mut out_len): (*mut c_char, usize) = (ptr::null_mut(), 0);
        let (mut status, mut status_len): (*mut c_char, usize) = (ptr::null_mut(), 0);
        // SAFETY: the handle is connected; cmds holds one NUL-terminated command alive for the
        // call; the out-pointers receive librados' buffers, freed below.
        let ret = unsafe {
            ffi::rados_mgr_command(
                self.handle,
                cmds.as_mut_ptr(),
                1,
                ptr::null(),
                0,
                &mut out,
                &mut out_len,
                &mut status,
                &mut status_len,
            )
        };
        let text = |buf: *mut c_char, len: usize| {
            if buf.is_null() {
                return String::new();
            }
            // SAFETY: librados' buffer of `len` bytes, alive until freed below.
            let copy = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
            // SAFETY: librados' buffer, freed once, after the copy.
            unsafe { rados::rados_buffer_free(buf) };
            String::from_utf8_lossy(&copy).into_owned()
        };
        let (out, status) = (text(out, out_len), text(status, status_len));
        // librados 16 answers a manager command that timed out with a positive ETIMEDOUT.
        match ret {
            0 => Ok(out),
            ret => Err((-ret.abs(), status)),
        }
    }

    /// An I/O context on `pool`. It keeps the cluster alive for as long as it lives.
    pub fn pool(self: &Arc<Self>, pool: &str) -> Result<IoCtx> {
        let target = Target::pool(pool).by(&self.entity);
        let pool_c = cstring(pool)?;
        let mut handle: rados::rados_ioctx_t = ptr::null_mut();
        // SAFETY: the cluster is connected; handle is a valid out-pointer.
        let ret = unsafe { rados::rados_ioctx_create(self.handle, pool_c.as_ptr(), &mut handle) };
        check(ret.into(), Op::Open, &target)?;
        // SAFETY: the ioctx was just created. Full-try lets the clean-up of a partial image go
        // through on a full pool; new data still cannot be written there.
        unsafe { ffi::rados_set_pool_full_try(handle) };
        Ok(IoCtx {
            handle,
            pool: pool.to_owned(),
            cluster: Arc::clone(self),
        })
    }
}

impl Cluster {
    /// A failure of `step` while connecting (or configuring) this handle.
    fn error(&self, step: impl Into<String>, ret: i64) -> Error {
        Error::Connect {
            step: step.into(),
            settings: Some(self.settings.clone()),
            errno: errno_of(ret),
            identity: None,
        }
    }

    /// Whether this process made the handle. In a child of `fork()` it has none of its threads,
    /// and tearing it down (or anything on it) waits for them for good: a value inherited from
    /// the parent (a writer the child's garbage collector frees) leaks it instead.
    pub(crate) fn is_own(&self) -> bool {
        self.pid == std::process::id()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.is_own() {
            return;
        }
        // SAFETY: the handle is owned by this value and every IoCtx holds an Arc to it, so no
        // ioctx on it is alive any more.
        unsafe { rados::rados_shutdown(self.handle) };
    }
}

/// A `rados_ioctx_t` on one pool; holds its cluster so the two are torn down in order.
pub struct IoCtx {
    handle: rados::rados_ioctx_t,
    pool: String,
    cluster: Arc<Cluster>,
}

// SAFETY: librados I/O contexts are safe to share for I/O; this type never changes the ioctx's
// namespace or snapshot context after creation.
unsafe impl Send for IoCtx {}
// SAFETY: as above.
unsafe impl Sync for IoCtx {}

impl IoCtx {
    pub(crate) fn handle(&self) -> rados::rados_ioctx_t {
        self.handle
    }

    pub(crate) fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    pub(crate) fn pool(&self) -> &str {
        &self.pool
    }

    /// `image` in this pool, acted on as this connection's entity: what errors name.
    pub(crate) fn target(&self, image: &str) -> Target {
        Target::image(&self.pool, image).by(self.cluster.entity())
    }
}

impl Drop for IoCtx {
    fn drop(&mut self) {
        if !self.cluster.is_own() {
            return; // inherited over a fork (`Cluster::is_own`)
        }
        // SAFETY: owned handle, destroyed once; images opened on it hold an Arc<IoCtx>.
        unsafe { rados::rados_ioctx_destroy(self.handle) };
    }
}

/// "127.0.0.1:0/3710147553" of librados' "[v2:127.0.0.1:0/3710147553,v1:...]": the first address
/// without its protocol, as the OSDs list watchers and the blocklist lists entries (one entry
/// covers every protocol).
fn plain_address(addrs: &str) -> String {
    let first = addrs
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .next()
        .unwrap_or_default();
    ["v1:", "v2:", "any:"]
        .iter()
        .find_map(|prefix| first.strip_prefix(prefix))
        .unwrap_or(first)
        .to_owned()
}

pub(crate) fn cstring(value: &str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::Usage(format!("{value:?} contains a NUL byte")))
}

fn describe(options: &ConnectOptions) -> String {
    format!(
        "conf {}, user {}",
        options
            .conf_file
            .as_deref()
            .unwrap_or("<default search path>"),
        options.user.as_deref().unwrap_or("<default>"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_named_as_the_blocklist_names_it() {
        assert_eq!(
            plain_address("[v2:127.0.0.1:0/3710147553,v1:127.0.0.1:0/3710147553]"),
            "127.0.0.1:0/3710147553"
        );
        assert_eq!(plain_address("10.0.0.1:0/42"), "10.0.0.1:0/42");
    }

    #[test]
    fn an_exiting_process_connects_no_more() {
        // Marks this test process as exiting: no other cargo test connects to a cluster.
        shut_down_idle();
        let options = ConnectOptions::new(
            Some("/nonexistent/ceph.conf".into()),
            Some("glance".into()),
            None,
        );
        // Not "reading the configuration file failed": no handle was even created.
        let err = Cluster::shared(&options).err().expect("a refusal");
        assert_eq!(
            err.to_string(),
            "cannot connect to the Ceph cluster (conf /nonexistent/ceph.conf, user glance): \
             connecting while the process is exiting failed: Operation canceled (errno 125)"
        );
        assert_eq!(Cluster::shared_count(), 0);
    }
}
