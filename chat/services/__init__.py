"""Business rules for chat sessions, messages and cached replies, one module per seam:

- checks: `ChatError`, and the checks on a message and a conversation's id
- sessions: the sidebar's list, a person's own session, create, rename, pin, archive, restore
  and delete
- instructions: custom instructions, and how they reach the model
- titles: a conversation's first and generated title
- branches: versions of regenerated replies and edited messages, the branch shown
- turns: what the model reads, a turn planned before admission and stored after it
- replies: how a reply is kept alive, saved and finished, and the message object
- cached_lookup: the cached-reply lookup on the hot path
- sampling: what replies and titles are generated with
- api: conversations over the REST API

The websocket consumer, the views and the REST API call these (sync) functions; the consumer
through `database_sync_to_async`. Callers import from the modules: this package imports none
of them, so importing one (chat.cached_replies takes `sampling.default_sampling`) does not load
the rest.
"""
