"""One ANTLR parse per definition (patch P9, applied by `install()` under P6/P8's wrapper).

P9  Parse trees kept per definition.
    Where: `AmazonStateLanguageParser.parse` (`asl/parse/asl_parser.py`): lexer and parser build
           the definition's parse tree, then `Preprocessor().visit(tree)` turns it into the
           program the execution evaluates.
    Why:   every execution parses its state machine's definition again, in its own thread and,
           since P8, one at a time. The ANTLR parse is most of it: measured with py-spy on the
           local cloud while 50 erasure requests were filed at once, moto's `parse` was 24 % of
           the local cloud process's CPU, four fifths of it the ANTLR parse. Lethe's four
           definitions never change while the local cloud runs.
    What:  the parse tree is kept per definition text (a bounded LRU); each parse still runs the
           `Preprocessor` on it, so every execution gets program components of its own, exactly
           as before (they hold evaluation state, the tree does not: the preprocessor only reads
           it). A definition with syntax errors is parsed, and refused, every time.

The engine's own steps are repeated here (moto 5.2.5's `parse`, checked by the version pin in
`install`): lexer, token stream, parser with a `SyntaxErrorListener`, `state_machine()`, then
the preprocessor.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from antlr4 import CommonTokenStream, InputStream
from moto.stepfunctions.parser.asl.antlr.runtime.ASLLexer import ASLLexer
from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
from moto.stepfunctions.parser.asl.parse.asl_parser import (
    ASLParserException,
    SyntaxErrorListener,
)
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

MAX_TREES: Final = 64  # definitions kept; Lethe has four, plus the item batchers' fragments


class ParseTrees:
    """Parse trees by definition text, least recently used dropped first."""

    def __init__(self, capacity: int = MAX_TREES) -> None:
        self._capacity = capacity
        self._trees: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.parsed = 0  # ANTLR parses done (a test reads it)

    def tree(self, definition: str) -> Any:
        """The definition's parse tree: kept, or parsed now (ASLParserException on a syntax
        error, which is never kept)."""
        with self._lock:
            found = self._trees.get(definition)
            if found is not None:
                self._trees.move_to_end(definition)
                return found
        tree = _antlr_tree(definition)
        with self._lock:
            self.parsed += 1
            self._trees[definition] = tree
            self._trees.move_to_end(definition)
            while len(self._trees) > self._capacity:
                self._trees.popitem(last=False)
        return tree

    def parse(self, definition: str) -> tuple[Any, Any]:
        """What moto's `AmazonStateLanguageParser.parse` returns: a new program, and the tree."""
        tree = self.tree(definition)
        return Preprocessor().visit(tree), tree


def _antlr_tree(definition: str) -> Any:
    errors = SyntaxErrorListener()  # type: ignore[no-untyped-call]
    parser = ASLParser(CommonTokenStream(ASLLexer(InputStream(definition))))
    parser.removeErrorListeners()
    parser.addErrorListener(errors)
    tree = parser.state_machine()  # type: ignore[no-untyped-call]
    if errors.errors:
        raise ASLParserException(errors=errors.errors)
    return tree
