//! repoll: a connection's future polled again at once when it wakes itself, instead of going
//! back to tokio's queue.
//!
//! hyper's HTTP/1 server hands a request's body to the handler through a channel whose two
//! ends live in the same task (the connection's): the dispatcher putting the body in wakes the
//! handler, and the handler taking it wakes the dispatcher, both while the task is being
//! polled. tokio treats a task woken during its own poll as one that yielded: it goes to the
//! back of the run queue and another worker is unparked to take it (an eventfd write, and a
//! worker that wakes up, finds the task gone and parks again). On the project's 2-core
//! machine that was a wasted wake of the other worker on every request at one connection
//! (BENCHMARKS.md, "Where an HTTP call's time goes").
//!
//! [`Repoll`] polls its future with a waker of its own: a wake that comes while the future is
//! being polled is remembered and answered by polling again right away (at most
//! [`MAX_REPOLLS`] times in a row, then the wake goes to tokio, so that a connection that keeps
//! waking itself still lets other tasks run: hyper's own yield after 16 rounds reaches tokio
//! that way); any other wake goes to the task as usual.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Polls again in a row, at most, before a self-wake is left to tokio.
pub(crate) const MAX_REPOLLS: usize = 8;

/// `F`, polled again at once when it wakes itself while being polled.
pub(crate) struct Repoll<F> {
    inner: Pin<Box<F>>,
    signal: Arc<Signal>,
    waker: Waker,
}

/// The waker [`Repoll`] polls its future with.
#[derive(Default)]
struct Signal {
    /// True while the future is being polled.
    polling: AtomicBool,
    /// Set by a wake that came while it was.
    woken: AtomicBool,
    /// The task's own waker, for every other wake.
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl<F: Future> Repoll<F> {
    pub(crate) fn new(inner: F) -> Self {
        let signal = Arc::new(Signal::default());
        Repoll {
            inner: Box::pin(inner),
            waker: Waker::from(Arc::clone(&signal)),
            signal,
        }
    }

    /// The future it polls.
    pub(crate) fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..=MAX_REPOLLS {
            this.signal.woken.store(false, Ordering::SeqCst);
            this.signal.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            this.signal.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            // A wake after `polling` turned false went to the task itself; one before it
            // is seen here. Either way none is lost.
            if !this.signal.woken.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: its turn goes to the other tasks first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `times` times while polled, then is ready; counts its polls.
    struct SelfWaking {
        times: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.times == 0 {
                return Poll::Ready(());
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes that reach the task.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_self_wake_is_answered_by_polling_again_and_reaches_the_task_only_past_the_cap() {
        let task = Arc::new(Counted::default());
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);

        let polls = Arc::new(AtomicUsize::new(0));
        let mut few = Box::pin(Repoll::new(SelfWaking {
            times: 3,
            polls: Arc::clone(&polls),
        }));
        assert!(few.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 4);
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "no wake went to the task");

        let polls = Arc::new(AtomicUsize::new(0));
        let mut many = Box::pin(Repoll::new(SelfWaking {
            times: 100,
            polls: Arc::clone(&polls),
        }));
        assert!(many.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS + 1);
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "past the cap, the task is woken"
        );
    }

    #[test]
    fn a_wake_from_elsewhere_between_polls_reaches_the_task() {
        let task = Arc::new(Counted::default());
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        let (sender, receiver) = std::sync::mpsc::channel::<Waker>();
        // Pending until woken from outside: keeps the waker it was polled with.
        let mut waiting = Box::pin(Repoll::new(std::future::poll_fn(move |cx| {
            let _ = sender.send(cx.waker().clone());
            Poll::<()>::Pending
        })));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        let kept = receiver.recv().expect("polled once");
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        std::thread::spawn(move || kept.wake())
            .join()
            .expect("woken");
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the wake reached the task"
        );
    }
}
