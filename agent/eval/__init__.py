"""The eval suite: small realistic tasks in throwaway git repositories, run by the real agent
core with any model or engine, checked, and reported (`spec-agent eval`)."""
