"""`/v1/openapi.json`, generated from the schema types the views validate and answer with.

The paths are listed here (method, request type, response types per status); every schema
comes from `chat.api.schemas`, so the description cannot drift from what is accepted.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from chat.api import schemas
from feedback import api as feedback
from knowledge import api as knowledge

REF = "#/components/schemas/{model}"

_ERRORS = {
    400: "Invalid request: the parameter at fault is in error.param.",
    401: "No API key, or an incorrect, revoked or expired one.",
    404: "Unknown model, route, completion or document.",
    409: "The same file is already uploaded (error.message names it).",
    413: "The request body is too large, or the tenant's document storage is full.",
    415: "The file is not one qassist reads, or its content is not what its name says.",
    429: "A limit of the key's tenant: Retry-After says when to try again.",
    500: "The server failed.",
    503: "The engine is at capacity or no inference worker answers: retry later.",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): _json(schemas.ErrorResponse, _ERRORS[s]) for s in statuses}


_ID_PARAM = {
    "name": "completion_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The id a completion was returned with (chatcmpl-…).",
}


_BATCH_PARAM = {
    "name": "batch_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The id a batch was created with (batch_…).",
}


_DOCUMENT_PARAM = {
    "name": "document_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The id a document was uploaded with (doc-…).",
}
_UPLOAD = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "title": {"type": "string", "maxLength": 300},
                    "groups": {
                        "type": "string",
                        "description": "Upload only: names of the tenant's groups whose members "
                        "may read it, comma-separated; absent: everyone in the tenant.",
                    },
                },
            }
        }
    },
}


def _paths() -> dict[str, Any]:
    completion = _json(schemas.ChatCompletion, "The completion (`stream` false).")
    completion["content"]["text/event-stream"] = {
        # One event (before Open API 3.2's itemSchema, `schema` describes each event).
        "schema": {
            "type": "object",
            "description": "Server-sent events (`stream` true): `data: <ChatCompletionChunk>` "
            "events, then `data: [DONE]`. An error after the stream started is sent as "
            "`data: <ErrorResponse>` and ends it.",
            "required": ["data"],
            "properties": {
                "data": {
                    "anyOf": [
                        {
                            "contentMediaType": "application/json",
                            "contentSchema": _ref(schemas.ChatCompletionChunk),
                        },
                        {
                            "contentMediaType": "application/json",
                            "contentSchema": _ref(schemas.ErrorResponse),
                        },
                        {"const": "[DONE]"},
                    ]
                },
                "event": {"const": "message"},
            },
        }
    }
    return {
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "Generate the assistant's reply to a conversation.",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": _ref(schemas.ChatCompletionRequest)}
                    },
                },
                "responses": {"200": completion, **_errors(400, 401, 404, 413, 429, 500, 503)},
            }
        },
        "/v1/chat/completions/{completion_id}": {
            "get": {
                "operationId": "getChatCompletion",
                "summary": "A completion made with one of the tenant's API keys.",
                "parameters": [_ID_PARAM],
                "responses": {
                    "200": _json(schemas.ChatCompletion, "The stored completion."),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/chat/completions/{completion_id}/messages": {
            "get": {
                "operationId": "getChatCompletionMessages",
                "summary": "The messages a stored completion answered.",
                "parameters": [_ID_PARAM],
                "responses": {
                    "200": _json(schemas.StoredMessageList, "The request's messages."),
                    **_errors(401, 404),
                },
            }
        },
        "/v1/chat/completions/{completion_id}/feedback": {
            "post": {
                "operationId": "createChatCompletionFeedback",
                "summary": "Rate a completion up or down, with an optional reason and comment; "
                "posting again replaces the rating.",
                "parameters": [_ID_PARAM],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(feedback.FeedbackCreate)}},
                },
                "responses": {
                    "200": _json(feedback.FeedbackObject, "The completion's rating."),
                    **_errors(400, 401, 404, 413),
                },
            }
        },
        "/v1/batches": {
            "post": {
                "operationId": "createBatch",
                "summary": "Submit many chat completions to run in the background.",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": _ref(schemas.BatchCreate)},
                        "application/jsonl": {
                            "schema": {
                                "type": "string",
                                "description": "One ChatCompletionRequest or BatchLine per line.",
                            }
                        },
                    },
                },
                "responses": {
                    "201": _json(schemas.BatchObject, "The batch, queued."),
                    **_errors(400, 401, 404, 413),
                },
            },
            "get": {
                "operationId": "listBatches",
                "summary": "The tenant's latest batches.",
                "responses": {"200": _json(schemas.BatchList, "The batches."), **_errors(401)},
            },
        },
        "/v1/batches/{batch_id}": {
            "get": {
                "operationId": "getBatch",
                "summary": "A batch's status and progress.",
                "parameters": [_BATCH_PARAM],
                "responses": {"200": _json(schemas.BatchObject, "The batch."), **_errors(401, 404)},
            }
        },
        "/v1/batches/{batch_id}/cancel": {
            "post": {
                "operationId": "cancelBatch",
                "summary": "Cancel what has not run yet.",
                "parameters": [_BATCH_PARAM],
                "responses": {"200": _json(schemas.BatchObject, "The batch."), **_errors(401, 404)},
            }
        },
        "/v1/batches/{batch_id}/results": {
            "get": {
                "operationId": "getBatchResults",
                "summary": "The finished items, one BatchResultLine per line, in order.",
                "parameters": [_BATCH_PARAM],
                "responses": {
                    "200": {
                        "description": "JSONL: one BatchResultLine per line.",
                        "content": {
                            "application/jsonl": {
                                "schema": {
                                    "type": "string",
                                    "description": "Lines of BatchResultLine.",
                                }
                            }
                        },
                    },
                    **_errors(401, 404),
                },
            }
        },
        "/v1/knowledge/documents": {
            "get": {
                "operationId": "listKnowledgeDocuments",
                "summary": "The tenant's knowledge base: its documents and the storage used.",
                "responses": {
                    "200": _json(knowledge.DocumentList, "The documents."),
                    **_errors(401),
                },
            },
            "post": {
                "operationId": "uploadKnowledgeDocument",
                "summary": "Upload a document (PDF, DOCX, HTML, Markdown, text); indexed in the "
                "background.",
                "requestBody": _UPLOAD,
                "responses": {
                    "202": _json(knowledge.DocumentObject, "The document, queued."),
                    **_errors(400, 401, 409, 413, 415),
                },
            },
        },
        "/v1/knowledge/documents/{document_id}": {
            "get": {
                "operationId": "getKnowledgeDocument",
                "summary": "One document: status, indexing progress, or why it failed.",
                "parameters": [_DOCUMENT_PARAM],
                "responses": {
                    "200": _json(knowledge.DocumentObject, "The document."),
                    **_errors(401, 404),
                },
            },
            "put": {
                "operationId": "replaceKnowledgeDocument",
                "summary": "A new version of the document: re-indexed; the old one answers "
                "until the new one is ready.",
                "parameters": [_DOCUMENT_PARAM],
                "requestBody": _UPLOAD,
                "responses": {
                    "202": _json(knowledge.DocumentObject, "The document, queued again."),
                    **_errors(400, 401, 404, 413, 415),
                },
            },
            "patch": {
                "operationId": "setKnowledgeDocumentGroups",
                "summary": "Who may read the document: the members of these groups, or "
                "(null) everyone in the tenant. Its passages follow at once.",
                "parameters": [_DOCUMENT_PARAM],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(knowledge.DocumentGroups)}},
                },
                "responses": {
                    "200": _json(knowledge.DocumentObject, "The document."),
                    **_errors(400, 401, 404, 413),
                },
            },
            "delete": {
                "operationId": "deleteKnowledgeDocument",
                "summary": "Delete the document with its passages, vectors and index entries.",
                "parameters": [_DOCUMENT_PARAM],
                "responses": {
                    "200": _json(knowledge.DocumentDeleted, "Deleted."),
                    **_errors(401, 404),
                },
            },
        },
        "/v1/knowledge/documents/{document_id}/content": {
            "get": {
                "operationId": "getKnowledgeDocumentContent",
                "summary": "The file as it was uploaded.",
                "parameters": [_DOCUMENT_PARAM],
                "responses": {
                    "200": {
                        "description": "The file's bytes.",
                        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
                    },
                    **_errors(401, 404),
                },
            }
        },
        "/v1/embeddings": {
            "post": {
                "operationId": "createEmbedding",
                "summary": "Vectors for texts, from the embedding model of company knowledge.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(schemas.EmbeddingRequest)}},
                },
                "responses": {
                    "200": _json(schemas.EmbeddingList, "One vector per text, in order."),
                    **_errors(400, 401, 404, 413, 429, 500, 503),
                },
            }
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "summary": "The model this server serves.",
                "responses": {"200": _json(schemas.ModelList, "The models."), **_errors(401)},
            }
        },
    }


_MODELS: list[type[BaseModel]] = [
    schemas.ChatCompletionRequest,
    schemas.ChatCompletion,
    schemas.EmbeddingRequest,
    schemas.EmbeddingList,
    schemas.ChatCompletionChunk,
    schemas.ModelList,
    schemas.StoredMessageList,
    schemas.ErrorResponse,
    schemas.BatchCreate,
    schemas.BatchObject,
    schemas.BatchList,
    schemas.BatchResultLine,
    knowledge.DocumentObject,
    knowledge.DocumentList,
    knowledge.DocumentDeleted,
    knowledge.DocumentGroups,
    feedback.FeedbackCreate,
    feedback.FeedbackObject,
]


def _example_request(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Name three primary colours."}],
        "max_tokens": 48,
    }


_REQUESTS = (
    schemas.ChatCompletionRequest,
    schemas.BatchCreate,
    schemas.EmbeddingRequest,
    feedback.FeedbackCreate,
    knowledge.DocumentGroups,
)


@functools.cache
def openapi_document() -> dict[str, Any]:
    from chat.api.endpoint import served_model

    _, defs = models_json_schema(
        [(model, "validation" if model in _REQUESTS else "serialization") for model in _MODELS],
        ref_template=REF,
    )
    from chat.api.embeddings import served_embedding_model

    request = defs["$defs"]["ChatCompletionRequest"]
    request["properties"]["model"]["examples"] = [served_model()]
    request["examples"] = [_example_request(served_model())]
    embedding = defs["$defs"]["EmbeddingRequest"]
    embedding["properties"]["model"]["examples"] = [served_embedding_model()]
    embedding["examples"] = [{"model": served_embedding_model(), "input": ["Hello", "你好"]}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "qassist",
            "version": "1",
            "description": "OpenAI-compatible chat completions for integrations, run as the "
            "tenant of the API key. See docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": _paths(),
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API key."}
            },
        },
    }
