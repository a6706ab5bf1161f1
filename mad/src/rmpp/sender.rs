//! The sending side of one RMPP transfer, as the kernel's `mad_rmpp.c` runs it
//! (`send_next_seg`, `ib_process_rmpp_send_wc`, `process_rmpp_ack`, `ib_retry_rmpp`,
//! `abort_send`): a state machine with no I/O, told of segment completions, ACKs, timeouts,
//! aborts and cancels, answering with the one next step for its port to take.
//!
//! - One segment is on the QP at a time; the next goes when the previous one's send completes,
//!   while the receiver's window (NewWindowLast) allows.
//! - At the window's end (or the last segment) the sender waits for an ACK; an ACK moves the
//!   window, and restores the retries when it acknowledges something new.
//! - An ACK timeout resends from the first unacknowledged segment, using one retry; with none
//!   left the send fails with RESP_TIMEOUT_ERR. An ACK for segments beyond those resent so
//!   far moves the resend past them.
//! - Once every segment is acknowledged the send is done, or, when a response is expected,
//!   waits for it with the client's timeout (no retry: the kernel completes it with
//!   RESP_TIMEOUT_ERR).
//! - A STOP or ABORT from the receiver ends it with REM_ABORT_ERR (vendor_err = the RMPP
//!   status), unless every segment was already acknowledged.
//! - However it ends, its completion waits for the segment on the QP to complete, so every
//!   segment's buffer is back before the client hears of the send.

use std::time::Duration;

use driver::verbs::WcStatus;
use mad_wire::rmpp::rmpp_status;

/// The kernel's ACK timeout: 2 s "until we can find the packet lifetime".
pub const ACK_TIMEOUT_MS: u32 = 2000;

/// What the sender waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing (a segment is on the QP, or the transfer is over).
    Nothing,
    /// An ACK, with the ACK timeout.
    Ack,
    /// The response, with the client's timeout.
    Response,
}

/// What the port does next for the transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing now.
    Nothing,
    /// Post segment `n` (1-based).
    Post(u32),
    /// Arm the ACK timer.
    ArmAck,
    /// Arm the response timer.
    ArmResponse,
    /// Report the send's one completion now.
    Finish(WcStatus, u32),
}

/// What to send back to the peer after an ACK, besides the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing.
    Nothing,
    /// An ACK with SegmentNumber 0 and NewWindowLast 1 (`ack_ds_ack`): the response to a
    /// request sent with RMPP may itself come with RMPP, one segment at a time at first.
    DsAck,
    /// An ABORT with this status (`nack_recv`).
    Abort(u8),
}

/// The state of one transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sender {
    /// Segments in the message.
    pub seg_count: u32,
    /// The last segment posted.
    pub seg_num: u32,
    /// The last segment acknowledged.
    pub last_ack: u32,
    /// The last segment the receiver's window allows.
    pub newwin: u32,
    /// A segment is on the QP (its send has not completed).
    pub in_flight: bool,
    /// A response is expected after the last ACK (the client gave a timeout).
    pub expects_response: bool,
    /// Retries left.
    pub retries_left: u32,
    /// Retries the client allowed (restored by every ACK that acknowledges something new).
    pub max_retries: u32,
    /// Retries used so far.
    pub retries_used: u32,
    /// What it waits for.
    pub wait: Wait,
    /// How it ended, once it has (its completion waits for the segment on the QP).
    pub done: Option<(WcStatus, u32)>,
}

impl Sender {
    /// A transfer of `seg_count` segments; `timeout_ms` > 0 when a response is expected.
    pub fn new(seg_count: u32, timeout_ms: u32, retries: u32) -> Sender {
        Sender {
            seg_count,
            seg_num: 0,
            last_ack: 0,
            // `init_newwin`: 1 (the kernel's double-sided ACKs only ever grant 1).
            newwin: 1,
            in_flight: false,
            expects_response: timeout_ms > 0,
            retries_left: retries,
            max_retries: retries,
            retries_used: 0,
            wait: Wait::Nothing,
            done: None,
        }
    }

    /// How long the ACK timer runs: the client's timeout, but never 0 and at most 2 s.
    pub fn ack_timeout(timeout_ms: u32) -> Duration {
        let ms = if timeout_ms == 0 || timeout_ms > ACK_TIMEOUT_MS {
            ACK_TIMEOUT_MS
        } else {
            timeout_ms
        };
        Duration::from_millis(u64::from(ms))
    }

    fn post_next(&mut self) -> Step {
        self.seg_num += 1;
        self.in_flight = true;
        self.wait = Wait::Nothing;
        Step::Post(self.seg_num)
    }

    /// End with `status` (once): now, or when the segment on the QP completes.
    fn end(&mut self, status: WcStatus, vendor_err: u32) -> Step {
        if self.done.is_some() {
            return Step::Nothing;
        }
        self.done = Some((status, vendor_err));
        self.wait = Wait::Nothing;
        if self.in_flight {
            Step::Nothing
        } else {
            Step::Finish(status, vendor_err)
        }
    }

    /// Start: the first segment.
    pub fn start(&mut self) -> Step {
        self.post_next()
    }

    /// The segment on the QP completed with `status`.
    pub fn on_send_completion(&mut self, status: WcStatus, vendor_err: u32) -> Step {
        self.in_flight = false;
        if let Some((s, v)) = self.done {
            return Step::Finish(s, v);
        }
        if status != WcStatus::Success {
            return self.end(status, vendor_err);
        }
        if self.last_ack == self.seg_count {
            if self.expects_response {
                self.wait = Wait::Response;
                return Step::ArmResponse;
            }
            return self.end(WcStatus::Success, 0);
        }
        if self.seg_num >= self.newwin || self.seg_num >= self.seg_count {
            self.wait = Wait::Ack;
            return Step::ArmAck;
        }
        self.post_next()
    }

    /// An ACK of segment `seg` granting the window up to `newwin`, with RMPPStatus `status`.
    pub fn on_ack(&mut self, seg: u32, newwin: u32, status: u8) -> (Step, Reply) {
        if status != rmpp_status::SUCCESS {
            let s = self.abort(rmpp_status::BAD_STATUS);
            return (s, Reply::Abort(rmpp_status::BAD_STATUS));
        }
        if newwin < seg {
            let s = self.abort(rmpp_status::W2S);
            return (s, Reply::Abort(rmpp_status::W2S));
        }
        if self.done.is_some() {
            return (Step::Nothing, Reply::Nothing);
        }
        if self.last_ack == self.seg_count {
            // A repeated ACK while the response is awaited.
            return (Step::Nothing, Reply::DsAck);
        }
        if seg > self.seg_count || seg > self.newwin {
            let s = self.abort(rmpp_status::S2B);
            return (s, Reply::Abort(rmpp_status::S2B));
        }
        if newwin < self.newwin || seg < self.last_ack {
            // An old ACK.
            return (Step::Nothing, Reply::Nothing);
        }
        if seg > self.last_ack {
            self.last_ack = seg;
            self.retries_left = self.max_retries;
        }
        // After a go-back resend the receiver may hold more than was resent: go on after
        // what it acknowledged. (The kernel resends those segments one by one, and the
        // receiver acknowledges each again.)
        if self.last_ack > self.seg_num {
            self.seg_num = self.last_ack;
        }
        self.newwin = newwin;
        if self.last_ack == self.seg_count {
            if !self.expects_response {
                return (self.end(WcStatus::Success, 0), Reply::Nothing);
            }
            if self.in_flight {
                return (Step::Nothing, Reply::DsAck);
            }
            self.wait = Wait::Response;
            return (Step::ArmResponse, Reply::DsAck);
        }
        if !self.in_flight && self.seg_num < self.newwin && self.seg_num < self.seg_count {
            return (self.post_next(), Reply::Nothing);
        }
        (Step::Nothing, Reply::Nothing)
    }

    /// The ACK or response timer expired.
    pub fn on_timeout(&mut self) -> Step {
        if self.done.is_some() || self.in_flight {
            return Step::Nothing;
        }
        self.wait = Wait::Nothing;
        if self.retries_left == 0 {
            return self.end(WcStatus::RespTimeoutErr, 0);
        }
        self.retries_left -= 1;
        self.retries_used += 1;
        if self.last_ack == self.seg_count {
            // The response did not come: no retry of a whole transfer.
            return self.end(WcStatus::RespTimeoutErr, 0);
        }
        // Go back to the first segment not acknowledged.
        self.seg_num = self.last_ack;
        self.post_next()
    }

    /// The receiver stopped or aborted the transfer with `rmpp_status`; ignored once every
    /// segment is acknowledged.
    pub fn abort(&mut self, status: u8) -> Step {
        if self.last_ack == self.seg_count {
            return Step::Nothing;
        }
        self.end(WcStatus::RemAbortErr, u32::from(status))
    }

    /// The response arrived: the send is done.
    pub fn on_response(&mut self) -> Step {
        self.end(WcStatus::Success, 0)
    }

    /// Canceled (or the device died): end with `status`.
    pub fn cancel(&mut self, status: WcStatus, vendor_err: u32) -> Step {
        self.end(status, vendor_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeouts_are_the_clients_but_at_most_2_s() {
        assert_eq!(Sender::ack_timeout(0), Duration::from_secs(2));
        assert_eq!(Sender::ack_timeout(500), Duration::from_millis(500));
        assert_eq!(Sender::ack_timeout(2000), Duration::from_secs(2));
        assert_eq!(Sender::ack_timeout(9000), Duration::from_secs(2));
    }

    #[test]
    fn one_segment_at_a_time_within_the_window() {
        let mut s = Sender::new(5, 0, 1);
        assert_eq!(s.start(), Step::Post(1));
        // Window 1 until the first ACK.
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        assert_eq!(s.wait, Wait::Ack);
        // ACK 1, window to 3: segment 2 goes.
        assert_eq!(s.on_ack(1, 3, 0), (Step::Post(2), Reply::Nothing));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::Post(3));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        // ACK 3, window to 10: 4 and 5.
        assert_eq!(s.on_ack(3, 10, 0), (Step::Post(4), Reply::Nothing));
        // An ACK while a segment is on the QP moves the window but posts nothing.
        assert_eq!(s.on_ack(3, 10, 0), (Step::Nothing, Reply::Nothing));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::Post(5));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        // The last ACK with no response expected completes it.
        assert_eq!(
            s.on_ack(5, 10, 0),
            (Step::Finish(WcStatus::Success, 0), Reply::Nothing)
        );
        assert_eq!(s.done, Some((WcStatus::Success, 0)));
        // Later ACKs change nothing.
        assert_eq!(s.on_ack(5, 10, 0), (Step::Nothing, Reply::Nothing));
    }

    #[test]
    fn an_ack_timeout_resends_from_the_first_unacknowledged_segment() {
        let mut s = Sender::new(4, 0, 2);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        s.on_ack(1, 64, 0);
        for _ in 2..4 {
            s.on_send_completion(WcStatus::Success, 0);
        }
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        assert_eq!(s.seg_num, 4);
        // Segment 3 was lost: no ACK. The timeout goes back to segment 2.
        assert_eq!(s.on_timeout(), Step::Post(2));
        assert_eq!((s.retries_left, s.retries_used), (1, 1));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::Post(3));
        // An ACK of 4 restores the retries and ends the transfer once 4 is done.
        assert_eq!(s.on_ack(4, 64, 0), (Step::Nothing, Reply::Nothing));
        assert_eq!(s.retries_left, 2);
        assert_eq!(
            s.on_send_completion(WcStatus::Success, 0),
            Step::Finish(WcStatus::Success, 0),
            "the completion waited for the segment on the QP"
        );
    }

    #[test]
    fn an_ack_beyond_the_resent_segments_skips_them() {
        let mut s = Sender::new(10, 0, 1);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        s.on_ack(1, 8, 0);
        for _ in 2..8 {
            s.on_send_completion(WcStatus::Success, 0);
        }
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        // 3 was lost; the receiver holds 4..8 out of sequence. Timeout: back to 2.
        assert_eq!(s.on_timeout(), Step::Post(2));
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::Post(3));
        // 3 fills the gap: the receiver acknowledges 8 and opens the window to 16 while 3's
        // send is still on the QP.
        assert_eq!(s.on_ack(8, 16, 0), (Step::Nothing, Reply::Nothing));
        assert_eq!(
            s.on_send_completion(WcStatus::Success, 0),
            Step::Post(9),
            "not 4..8 again"
        );
    }

    #[test]
    fn out_of_retries_it_times_out() {
        let mut s = Sender::new(2, 0, 0);
        s.start();
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        assert_eq!(s.on_timeout(), Step::Finish(WcStatus::RespTimeoutErr, 0));
        assert_eq!(s.on_timeout(), Step::Nothing, "once");
    }

    #[test]
    fn a_response_is_awaited_after_the_last_ack_without_retry() {
        let mut s = Sender::new(1, 100, 3);
        s.start();
        assert_eq!(s.on_send_completion(WcStatus::Success, 0), Step::ArmAck);
        assert_eq!(s.on_ack(1, 1, 0), (Step::ArmResponse, Reply::DsAck));
        assert_eq!(s.wait, Wait::Response);
        // A repeated ACK is answered with the double-sided ACK again.
        assert_eq!(s.on_ack(1, 1, 0), (Step::Nothing, Reply::DsAck));
        assert_eq!(s.on_timeout(), Step::Finish(WcStatus::RespTimeoutErr, 0));
        // The response, had it come, completes it.
        let mut s = Sender::new(1, 100, 3);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        s.on_ack(1, 1, 0);
        assert_eq!(s.on_response(), Step::Finish(WcStatus::Success, 0));
    }

    #[test]
    fn the_last_ack_before_the_last_completion() {
        let mut s = Sender::new(1, 100, 0);
        s.start();
        // The ACK beats the send's own completion.
        assert_eq!(s.on_ack(1, 1, 0), (Step::Nothing, Reply::DsAck));
        assert_eq!(
            s.on_send_completion(WcStatus::Success, 0),
            Step::ArmResponse
        );
    }

    #[test]
    fn stops_aborts_and_bad_acks() {
        // STOP/ABORT from the receiver.
        let mut s = Sender::new(3, 0, 0);
        s.start();
        assert_eq!(s.abort(1), Step::Nothing, "waits for the segment on the QP");
        assert_eq!(
            s.on_send_completion(WcStatus::Success, 0),
            Step::Finish(WcStatus::RemAbortErr, 1)
        );
        // An ACK beyond the window, or with a window below its segment, or a status.
        let mut s = Sender::new(3, 0, 0);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        assert_eq!(
            s.on_ack(2, 5, 0),
            (
                Step::Finish(WcStatus::RemAbortErr, u32::from(rmpp_status::S2B)),
                Reply::Abort(rmpp_status::S2B)
            )
        );
        let mut s = Sender::new(3, 0, 0);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        assert_eq!(
            s.on_ack(1, 0, 0).1,
            Reply::Abort(rmpp_status::W2S),
            "NewWindowLast below the segment"
        );
        let mut s = Sender::new(3, 0, 0);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        assert_eq!(
            s.on_ack(1, 4, 3),
            (
                Step::Finish(WcStatus::RemAbortErr, u32::from(rmpp_status::BAD_STATUS)),
                Reply::Abort(rmpp_status::BAD_STATUS)
            )
        );
        // Once all is acknowledged an abort is ignored.
        let mut s = Sender::new(1, 50, 0);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        s.on_ack(1, 1, 0);
        assert_eq!(s.abort(rmpp_status::T2L), Step::Nothing);
        assert_eq!(s.done, None);
    }

    #[test]
    fn a_failed_segment_fails_the_send_and_a_cancel_waits_for_the_qp() {
        let mut s = Sender::new(3, 0, 5);
        s.start();
        assert_eq!(
            s.on_send_completion(WcStatus::LocLenErr, 0x33),
            Step::Finish(WcStatus::LocLenErr, 0x33)
        );
        let mut s = Sender::new(3, 0, 5);
        s.start();
        assert_eq!(s.cancel(WcStatus::WrFlushErr, 0), Step::Nothing);
        assert_eq!(s.on_timeout(), Step::Nothing);
        assert_eq!(
            s.on_send_completion(WcStatus::Success, 0),
            Step::Finish(WcStatus::WrFlushErr, 0)
        );
        // Canceled while waiting for an ACK: at once.
        let mut s = Sender::new(3, 0, 5);
        s.start();
        s.on_send_completion(WcStatus::Success, 0);
        assert_eq!(
            s.cancel(WcStatus::WrFlushErr, 5),
            Step::Finish(WcStatus::WrFlushErr, 5)
        );
    }
}
