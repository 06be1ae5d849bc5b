-- 0008: approval requests bound to committed arguments (core/approval_args.py). A request made
-- from now on records args_version 2: its "args" hold each sensitive value as its keyed
-- commitment and mask, and "args_hash" covers those bytes, so the binding is checked with no
-- key and no card number is kept in clear; "args_sealed" holds the clear arguments encrypted
-- under the saga's data key (NULL without a master key). Older rows are version 1 (clear
-- arguments, their own rule).
ALTER TABLE sagacity_approval_requests
    ADD COLUMN args_version integer NOT NULL DEFAULT 1,
    ADD COLUMN args_sealed  text;
