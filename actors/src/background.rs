//! Work that must not compete with requests: the threads that run it are
//! niced below the process, so that when the two kinds are runnable at
//! once the HTTP workers go first and the background work takes the CPU
//! left over.

/// How much nicer than the process background threads run: the watchers,
/// the event log's compaction and the index snapshots. When a hundred
/// members relist at once, the watchers decode hundreds of MB of lists and
/// the compaction that follows walks and rewrites the records they
/// replaced; at the same priority the gets served meanwhile waited behind
/// them for a share of the two cores. Five steps lower they yield to
/// requests when both are runnable and use the CPU left over otherwise
/// (CFS weights 335 against 1024).
pub const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority by [`BACKGROUND_NICE`] (to 19 at
/// most; on Linux a nice value is a thread's own). A failure leaves it as
/// it was. Raising it again takes a privilege kubefold does not ask for:
/// call it only on a thread that does background work for the rest of its
/// life.
pub fn lower_priority() {
    let nice = rustix::process::getpriority_process(None).unwrap_or(0).saturating_add(BACKGROUND_NICE).min(19);
    if let Err(e) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!(error = %e, "Cannot lower the priority of a background thread.");
    }
}

/// The thread of a background job was lost (it could not start, or it
/// panicked).
#[derive(Debug)]
pub struct Lost;

/// Runs `job` on a new thread named `name`, niced (not on the blocking
/// pool, whose threads go on to serve requests), and resolves to its
/// result.
pub fn run<T: Send + 'static>(name: &str, job: impl FnOnce() -> T + Send + 'static) -> impl std::future::Future<Output = Result<T, Lost>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let started = std::thread::Builder::new().name(name.to_string()).spawn(move || {
        lower_priority();
        let _ = tx.send(job());
    });
    if let Err(e) = &started {
        tracing::error!(thread = name, error = %e, "Cannot start a background thread.");
    }
    async move { rx.await.map_err(|_| Lost) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(None).unwrap()
    }

    #[tokio::test]
    async fn a_job_runs_niced_on_its_own_thread_and_a_panic_is_lost_not_hung() {
        let caller = std::thread::current().id();
        let before = nice_of_this_thread();
        let (thread, name, nice) = run("kubefold-test-job", || {
            let me = std::thread::current();
            (me.id(), me.name().map(str::to_string), nice_of_this_thread())
        })
        .await
        .unwrap();
        assert_ne!(thread, caller);
        assert_eq!(name.as_deref(), Some("kubefold-test-job"));
        assert_eq!(nice, (before + BACKGROUND_NICE).min(19), "the job's thread is niced");
        assert_eq!(nice_of_this_thread(), before, "the caller's priority is its own");
        assert!(run("kubefold-test-panic", || -> u8 { panic!("job failed") }).await.is_err());
    }
}
