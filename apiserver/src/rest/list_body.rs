//! A LIST's body, streamed from the objects as stored.
//!
//! A list answer used to be copied whole into one buffer before its first
//! byte left: 16 parallel lists of 50,000 objects held 1.16 GB more than the
//! store. [`ListBody`] holds only the items' shared bytes (each a reference
//! to what the store already keeps) and copies at most [`CHUNK`] bytes at a
//! time as hyper asks for them, so a list costs the server a handle per item
//! whatever its size, and a client that reads slowly holds no copy.
//!
//! kube-apiserver streams list encoding the same way since 1.33
//! (`StreamingCollectionEncodingToJSON`). The length is known up front, so the
//! answer keeps its `Content-Length`, as before.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// How much one frame copies together: small items are joined (one write
/// per item would cost more than the copy), a large one goes out as it is.
const CHUNK: usize = 64 * 1024;

/// `{"kind":...,"metadata":...,"items":[` + items joined by commas + `]}`.
pub(crate) struct ListBody {
    /// What is left to send, in order.
    parts: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl ListBody {
    /// `head` is the list's JSON object without its closing brace.
    pub(crate) fn new(head: Bytes, items: Vec<Bytes>) -> ListBody {
        let mut parts = std::collections::VecDeque::with_capacity(items.len() * 2 + 2);
        parts.push_back(head);
        parts.push_back(Bytes::from_static(b",\"items\":["));
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                parts.push_back(Bytes::from_static(b","));
            }
            parts.push_back(item);
        }
        parts.push_back(Bytes::from_static(b"]}"));
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        ListBody { parts, remaining }
    }

    /// The next frame: one large part as it is, or small parts copied
    /// together up to [`CHUNK`].
    fn next_chunk(&mut self) -> Option<Bytes> {
        let first = self.parts.pop_front()?;
        if first.len() >= CHUNK {
            return Some(first);
        }
        let mut out = BytesMut::with_capacity(CHUNK);
        out.extend_from_slice(&first);
        while let Some(next) = self.parts.front() {
            if out.len() + next.len() > CHUNK {
                break;
            }
            out.extend_from_slice(next);
            self.parts.pop_front();
        }
        Some(out.freeze())
    }
}

impl Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        Poll::Ready(this.next_chunk().map(|chunk| {
            this.remaining -= chunk.len() as u64;
            Ok(Frame::data(chunk))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn collect(body: ListBody) -> (Vec<usize>, Vec<u8>) {
        let mut body = body;
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            sizes.push(data.len());
            all.extend_from_slice(&data);
        }
        (sizes, all)
    }

    #[tokio::test]
    async fn the_body_is_the_list_json_with_its_exact_length() {
        let items = vec![Bytes::from_static(b"{\"a\":1}"), Bytes::from_static(b"{}")];
        let body = ListBody::new(Bytes::from_static(b"{\"kind\":\"XList\""), items);
        assert_eq!(body.size_hint().exact(), Some(37));
        let (_, all) = collect(body).await;
        let v: serde_json::Value = serde_json::from_slice(&all).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "XList", "items": [{"a": 1}, {}]})
        );
        assert_eq!(all.len(), 37);
        let empty = ListBody::new(Bytes::from_static(b"{\"kind\":\"XList\""), vec![]);
        let (_, all) = collect(empty).await;
        assert_eq!(all, b"{\"kind\":\"XList\",\"items\":[]}");
    }

    #[tokio::test]
    async fn small_items_are_joined_and_a_large_one_is_not_copied() {
        let small = Bytes::from(vec![b'1'; 1000]);
        let large = Bytes::from(vec![b'2'; 3 * CHUNK]);
        let mut items = vec![small.clone(); 200];
        items.push(large.clone());
        let body = ListBody::new(Bytes::from_static(b"{"), items);
        let (sizes, all) = collect(body).await;
        assert!(sizes.iter().all(|s| *s <= 3 * CHUNK), "{sizes:?}");
        // 200 small items and their commas fit in a few frames, not 400.
        assert!(sizes.len() <= 8, "{} frames: {sizes:?}", sizes.len());
        assert!(
            sizes.contains(&(3 * CHUNK)),
            "the large item is its own frame"
        );
        assert_eq!(all.len(), 1 + 10 + 200 * 1000 + 200 + 3 * CHUNK + 2);
    }
}
