"""The summarizer service: summarizes each closed step's analyses, in chunks with a meta-summary, into a step summary."""
