//! Who is in a consumer group now, by librdkafka's DescribeConsumerGroups.
//!
//! rust-rdkafka offers only the classic DescribeGroups request
//! (`fetch_group_list`), which a broker answers for a group of the
//! `consumer` protocol (KIP-848, weir's default in group mode) with the
//! state `Dead` and no members. DescribeConsumerGroups answers for both
//! protocols; it is called here through librdkafka's C API.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use crate::error::{Result, WeirError};

/// The `client.id` of a group-mode instance's group consumer unless
/// `[kafka.properties]` sets one: it names the instance in the group's
/// member list for people and tools (`weir reset`), and builds before
/// issue #38 tell live instances by it. Members are told apart by their
/// member id ([`own_member_id`], `Member::member_id`), never by it: a
/// `client.id` is the user's to set.
pub fn instance_client_id(instance: &str) -> String {
    format!("weir-instance-{instance}")
}

/// One member of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member id the group coordinator knows it by (KIP-848: chosen
    /// once per consumer and kept when it rejoins; classic protocol: given
    /// at its first join).
    pub member_id: String,
    pub client_id: String,
    pub host: String,
}

/// The member id `client` (a group consumer) has in its group now, if it
/// joined.
pub fn own_member_id<C: ClientContext>(client: &Client<C>) -> Option<String> {
    // SAFETY: `rd_kafka_memberid` returns a string the caller owns (or
    // null), freed here with `rd_kafka_mem_free` after it is copied.
    unsafe {
        let rk = client.native_ptr();
        let id = rd::rd_kafka_memberid(rk);
        if id.is_null() {
            return None;
        }
        let text = CStr::from_ptr(id).to_string_lossy().into_owned();
        rd::rd_kafka_mem_free(rk, id as *mut std::ffi::c_void);
        (!text.is_empty()).then_some(text)
    }
}

/// The members of consumer group `group` now, asked through `client`
/// (any client of the cluster). A group that does not exist has none.
pub fn group_members<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<Vec<Member>> {
    let failed = |why: String| {
        WeirError::kafka(
            format!("describe consumer group {group:?}"),
            rdkafka::error::KafkaError::AdminOpCreation(why),
        )
    };
    let name = CString::new(group).map_err(|_| failed("the group id holds a NUL byte".into()))?;
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128 / 2) as i32;
    // SAFETY: every handle made here is destroyed before returning, after
    // the last read of what it owns (the event owns the result, its group
    // descriptions and their strings); `name` outlives the request call,
    // which copies it.
    unsafe {
        let rk = client.native_ptr();
        let queue = rd::rd_kafka_queue_new(rk);
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        );
        let mut errstr = [0 as std::ffi::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let mut groups = [name.as_ptr()];
        rd::rd_kafka_DescribeConsumerGroups(rk, groups.as_mut_ptr(), 1, options, queue);
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms.saturating_add(1_000));
        let answer = if event.is_null() {
            Err(failed(format!("no answer within {timeout:?}")))
        } else {
            members_of(event).map_err(failed)
        };
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_queue_destroy(queue);
        answer
    }
}

/// The members in a DescribeConsumerGroups result event.
///
/// # Safety
/// `event` must be a live DescribeConsumerGroups result event.
unsafe fn members_of(event: *mut rd::rd_kafka_event_t) -> std::result::Result<Vec<Member>, String> {
    let text = |s: *const std::ffi::c_char| {
        if s.is_null() {
            String::new()
        } else {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        }
    };
    if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(text(rd::rd_kafka_event_error_string(event)));
    }
    let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event);
    if result.is_null() {
        return Err("the answer is not a group description".into());
    }
    let mut count = 0usize;
    let descriptions = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
    let mut members = Vec::new();
    for i in 0..count {
        let description = *descriptions.add(i);
        let error = rd::rd_kafka_ConsumerGroupDescription_error(description);
        if !error.is_null() {
            let code = rd::rd_kafka_error_code(error);
            if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND {
                continue;
            }
            return Err(text(rd::rd_kafka_error_string(error)));
        }
        for m in 0..rd::rd_kafka_ConsumerGroupDescription_member_count(description) {
            let member = rd::rd_kafka_ConsumerGroupDescription_member(description, m);
            members.push(Member {
                member_id: text(rd::rd_kafka_MemberDescription_consumer_id(member)),
                client_id: text(rd::rd_kafka_MemberDescription_client_id(member)),
                host: text(rd::rd_kafka_MemberDescription_host(member)),
            });
        }
    }
    Ok(members)
}
