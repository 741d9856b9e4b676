"""Stand-in for torch.utils.data.DataLoader with a batch_sampler, as torch
runs it in the main process (num_workers=0): for each batch of indices the
sampler yields, fetch dataset[i] for each element and pass the list to
collate_fn."""


class DataLoader:
    def __init__(self, dataset, batch_sampler=None, collate_fn=None, **ignored):
        if batch_sampler is None or collate_fn is None:
            raise TypeError("the stand-in DataLoader needs batch_sampler and collate_fn")
        self.dataset, self.batch_sampler, self.collate_fn = dataset, batch_sampler, collate_fn

    def __iter__(self):
        for batch in self.batch_sampler:
            yield self.collate_fn([self.dataset[i] for i in batch])

    def __len__(self):
        return len(self.batch_sampler)
