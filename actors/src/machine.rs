//! The cluster watcher's state machine, free of I/O: the actor performs the
//! requests that [`Machine::step`] asks for and feeds the outcomes back.
//!
//! It follows the Kubernetes "API Concepts" page, "Efficient detection of
//! changes": list, then watch from the list's resourceVersion; on `410 Gone`
//! list again; resume a closed watch from the last resourceVersion seen.
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>

use std::time::Duration;

/// Where the watcher stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No usable member RV: the next request is a full list. Left when the
    /// list succeeds (to `Watching`) and re-entered after a 410.
    Listing,
    /// Watching from the member RV `rv` (after a list, or resumed from a
    /// persisted checkpoint). Left on 410 (to `Listing`).
    Watching {
        /// The last member RV seen.
        rv: String,
    },
}

/// What happened to the last request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The start, with the persisted checkpoint if any.
    Start {
        /// The member RV reached before a restart.
        checkpoint: Option<String>,
    },
    /// A full list succeeded at member RV `rv`.
    Listed {
        /// The list's resourceVersion.
        rv: String,
    },
    /// A watch event (or bookmark) moved the member RV to `rv`.
    Progress {
        /// The event's resourceVersion.
        rv: String,
    },
    /// The watch stream ended normally (timeout, server closed it).
    WatchEnded,
    /// The member answered 410 Gone / Expired: the RV is no longer served.
    Expired,
    /// The member's RVs went backwards (a member restored from backup).
    RvWentBack,
    /// A request failed (connection, 5xx, 429 ...); `retry_after` when the
    /// member said how long to wait.
    Failed {
        /// Retry-After from the member, when given.
        retry_after: Option<Duration>,
    },
}

/// The request the actor must make next, after `delay`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Wait this long first (backoff with jitter).
    pub delay: Duration,
    /// The request.
    pub request: Request,
}

/// A request to the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A full list.
    List,
    /// A watch from `rv`.
    Watch {
        /// Member resourceVersion to start after.
        rv: String,
    },
    /// Nothing to do now (progress inside a running watch).
    None,
}

/// The watcher's state machine.
#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    failures: u32,
    /// Relists since a watch last delivered anything: a member that expires
    /// every watch at once (a 410 storm) would otherwise be relisted in a
    /// hot loop, each list costing it a full read.
    fruitless_relists: u32,
    rng: u64,
    /// Smallest backoff.
    pub base_delay: Duration,
    /// Largest backoff.
    pub max_delay: Duration,
}

impl Machine {
    /// A machine with backoff from 500 ms to 30 s, jitter seeded by `seed`.
    pub fn new(seed: u64) -> Machine {
        Machine {
            state: State::Listing,
            failures: 0,
            fruitless_relists: 0,
            rng: seed | 1,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }

    /// The current state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Feeds an outcome; returns the next request.
    pub fn step(&mut self, input: Input) -> Action {
        match input {
            Input::Start { checkpoint } => {
                self.state = match checkpoint {
                    Some(rv) if !rv.is_empty() => State::Watching { rv },
                    _ => State::Listing,
                };
                self.now()
            }
            Input::Listed { rv } => {
                self.failures = 0;
                self.state = State::Watching { rv };
                self.now()
            }
            Input::Progress { rv } => {
                self.failures = 0;
                self.fruitless_relists = 0;
                if let State::Watching { rv: current } = &mut self.state {
                    *current = rv;
                }
                Action { delay: Duration::ZERO, request: Request::None }
            }
            Input::WatchEnded => self.now(),
            Input::Expired | Input::RvWentBack => {
                self.state = State::Listing;
                self.fruitless_relists = self.fruitless_relists.saturating_add(1);
                // The first relist is immediate; one that follows a relist
                // whose watch saw nothing backs off like a failure.
                let delay = match self.fruitless_relists {
                    0 | 1 => Duration::ZERO,
                    n => self.jittered(n - 1),
                };
                Action { delay, request: Request::List }
            }
            Input::Failed { retry_after } => {
                self.failures = self.failures.saturating_add(1);
                let delay = retry_after.unwrap_or_else(|| self.backoff());
                Action { delay, request: self.request() }
            }
        }
    }

    fn now(&self) -> Action {
        Action { delay: Duration::ZERO, request: self.request() }
    }

    fn request(&self) -> Request {
        match &self.state {
            State::Listing => Request::List,
            State::Watching { rv } => Request::Watch { rv: rv.clone() },
        }
    }

    /// Exponential backoff with full jitter in [d/2, d].
    fn backoff(&mut self) -> Duration {
        self.jittered(self.failures)
    }

    /// The `n`th (from 1) delay of the backoff: base doubling up to the cap,
    /// jittered in [d/2, d].
    fn jittered(&mut self, n: u32) -> Duration {
        let exp = n.saturating_sub(1).min(16);
        let full = self.base_delay.saturating_mul(1u32 << exp).min(self.max_delay);
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let frac = (self.rng % 1000) as u32;
        full / 2 + full / 2 * frac / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(rv: &str) -> Request {
        Request::Watch { rv: rv.into() }
    }

    #[test]
    fn fresh_start_lists_then_watches_from_the_list_rv() {
        let mut m = Machine::new(7);
        assert_eq!(m.step(Input::Start { checkpoint: None }).request, Request::List);
        assert_eq!(m.step(Input::Listed { rv: "100".into() }).request, watch("100"));
        assert_eq!(m.step(Input::Progress { rv: "105".into() }).request, Request::None);
        // A watch that times out resumes from the last RV, without a list.
        assert_eq!(m.step(Input::WatchEnded), Action { delay: Duration::ZERO, request: watch("105") });
    }

    #[test]
    fn restart_resumes_from_checkpoint_and_relists_after_410() {
        let mut m = Machine::new(7);
        assert_eq!(m.step(Input::Start { checkpoint: Some("42".into()) }).request, watch("42"));
        assert_eq!(m.step(Input::Expired).request, Request::List);
        assert_eq!(m.state(), &State::Listing);
        assert_eq!(m.step(Input::Listed { rv: "900".into() }).request, watch("900"));
    }

    #[test]
    fn bookmarks_move_the_resume_point() {
        let mut m = Machine::new(1);
        m.step(Input::Start { checkpoint: Some("1".into()) });
        m.step(Input::Progress { rv: "77".into() });
        assert_eq!(m.step(Input::WatchEnded).request, watch("77"));
    }

    #[test]
    fn member_rv_going_back_forces_a_relist() {
        let mut m = Machine::new(1);
        m.step(Input::Start { checkpoint: Some("500".into()) });
        assert_eq!(m.step(Input::RvWentBack).request, Request::List);
    }

    #[test]
    fn failures_back_off_with_jitter_and_a_cap_and_reset_on_success() {
        let mut m = Machine::new(99);
        m.step(Input::Start { checkpoint: Some("5".into()) });
        let mut last = Duration::ZERO;
        for i in 1..=12 {
            let a = m.step(Input::Failed { retry_after: None });
            assert_eq!(a.request, watch("5"), "a failed watch is retried from the same RV");
            let full = Duration::from_millis(500).saturating_mul(1 << (i - 1).min(16)).min(Duration::from_secs(30));
            assert!(a.delay >= full / 2 && a.delay <= full, "attempt {i}: {:?} not in [{:?}, {:?}]", a.delay, full / 2, full);
            last = a.delay;
        }
        assert!(last <= Duration::from_secs(30));
        assert_eq!(m.failures(), 12);
        let a = m.step(Input::Failed { retry_after: Some(Duration::from_secs(3)) });
        assert_eq!(a.delay, Duration::from_secs(3), "Retry-After from the member wins");
        m.step(Input::Progress { rv: "6".into() });
        assert_eq!(m.failures(), 0);
    }

    #[test]
    fn a_410_storm_backs_off_until_a_watch_delivers() {
        let mut m = Machine::new(5);
        m.step(Input::Start { checkpoint: Some("10".into()) });
        assert_eq!(m.step(Input::Expired).delay, Duration::ZERO, "the first relist is immediate");
        let mut delays = Vec::new();
        for _ in 0..6 {
            m.step(Input::Listed { rv: "20".into() });
            let a = m.step(Input::Expired);
            assert_eq!(a.request, Request::List);
            delays.push(a.delay);
        }
        for (i, delay) in delays.iter().enumerate() {
            let full = Duration::from_millis(500) * (1 << i);
            assert!(*delay >= full / 2 && *delay <= full, "relist {}: {delay:?} not in [{:?}, {full:?}]", i + 2, full / 2);
        }
        m.step(Input::Listed { rv: "30".into() });
        m.step(Input::Progress { rv: "31".into() });
        assert_eq!(m.step(Input::Expired).delay, Duration::ZERO, "a watch that delivered resets the backoff");
    }

    #[test]
    fn a_failed_list_is_retried_as_a_list() {
        let mut m = Machine::new(3);
        m.step(Input::Start { checkpoint: None });
        assert_eq!(m.step(Input::Failed { retry_after: None }).request, Request::List);
    }
}
