//! What the Ceph manager's task queue (`rbd task list`, its rbd_support module) says of the
//! removals handed to it.

use serde_json::Value;

/// Whether the task removing trash entry `id` of `pool`, in the JSON of `rbd task list`, last
/// failed because a client has the entry open: its retry message names EBUSY (errno 16). A
/// removal under way (the manager's own open of the image) has no retry message.
pub(crate) fn busy(tasks: &str, pool: &str, id: &str) -> bool {
    let Ok(Value::Array(tasks)) = serde_json::from_str::<Value>(tasks) else {
        return false;
    };
    tasks.iter().any(|task| {
        let refs = &task["refs"];
        refs["action"] == "trash remove"
            && refs["pool_name"] == pool
            && refs["pool_namespace"].as_str().unwrap_or("").is_empty()
            && refs["image_id"] == id
            && task["retry_message"]
                .as_str()
                .is_some_and(|message| message.starts_with("[errno 16]"))
    })
}

#[cfg(test)]
mod tests {
    use super::busy;

    /// As Ceph 16's manager lists a removal a client holds up, and one under way.
    const TASKS: &str = r#"[{"sequence": 17, "id": "755506e3", "message": "Removing image images/1ab4d43391fb from trash", "refs": {"action": "trash remove", "pool_name": "images", "pool_namespace": "", "image_id": "1ab4d43391fb"}, "retry_attempts": 2, "retry_time": "2026-12-07T19:55:56.267664", "retry_message": "[errno 16] RBD image is busy (error deleting image from trash)"}, {"sequence": 18, "id": "8c1f", "message": "Removing image images/2bb from trash", "refs": {"action": "trash remove", "pool_name": "images", "pool_namespace": "", "image_id": "2bb"}, "in_progress": true, "progress": 0.25}]"#;

    #[test]
    fn a_removal_a_client_holds_up_is_busy_and_one_under_way_is_not() {
        assert!(busy(TASKS, "images", "1ab4d43391fb"));
        assert!(!busy(TASKS, "images", "2bb"));
        assert!(!busy(TASKS, "other", "1ab4d43391fb"));
        assert!(!busy(TASKS, "images", "no-such-task"));
        assert!(!busy("[]", "images", "1ab4d43391fb"));
        assert!(!busy("not json", "images", "1ab4d43391fb"));
    }
}
